// PTD-P layout search (notes-dissertation §2, §3.2): choose (tp, pp, dp, vp, micro-batch, schedule,
// recompute) for a GPT on a homogeneous cluster, predicting each candidate's step time, throughput,
// bubble and memory per pipeline rank.
//
// Like PipeDream-2BW's planner (§3.2, Algorithm 1) the search enumerates "parallel pipelines" —
// equal stages, dp identical replicas — and scores each with a throughput and a memory model:
// - stage costs: the layers of the stage (cost_model.h) plus Megatron's tensor-parallel
//   all-reduces (two per layer forward, two backward, two more when recomputing) on the node's bus;
// - point-to-point transfers between stages are blocking, as in PTD-P's implementation: each
//   stage's forward and backward include sending its output on, in every micro-batch (ptdp.cpp);
// - the pipeline: synchronous (flush) kinds take the pipeline simulator's makespan of one step (or
//   its closed form, the same for uniform stages, as a fast path), then the data-parallel
//   all-reduce of the gradients, then the optimizer step; a kind that updates once per batch
//   without a flush (2bw) overlaps the all-reduce with the next batch,
//   t = max(m · max_i T_i, T_allreduce) (2BW's THROUGHPUT);
// - memory per rank: weight/grad/optimizer state, the extra weight versions the kind keeps, the
//   stashes of the schedule's peak in-flight micro-batches (as `memory_peaks` counts them),
//   transient recomputation memory and a fixed overhead.
// What a kind is — synchronous or not, interleaving or not, needing m >= pp, weight versions — is
// read from the schedule registry's traits (pipeline/schedules.h), never from its name. The planner
// only adds, per kind it can cost, the order of forwards and backwards its closed form assumes
// (ptdp.cpp); naming a kind it cannot cost is an error.
// Divisibility rules: tp divides n_head and the GPUs of a node; pp·vp divides n_layer; tp·pp divides
// the GPU count; micro_batch·dp divides global_batch; interleaving kinds need pp >= 2, vp >= 2 and
// m a multiple of pp, kinds with two weight versions m >= pp (the generators' rules); asynchronous
// kinds need pp >= 2 (the trainer's rule: one stage has no pipeline to run them on).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "plan/cluster.h"
#include "plan/cost_model.h"
#include "plan/model_desc.h"
#include "plan/profile.h"

namespace baton::plan {

struct Layout {
  int tp = 1, pp = 1, dp = 1, vp = 1, micro_batch = 1;
  std::string schedule = "1f1b";
  std::string recompute = "none";
  bool sequence_parallel = false;
  bool scatter_gather = false;
  bool zero1 = false;
};

struct PtdpProblem {
  GptShape shape;
  int global_batch = 32;
  std::string dtype = "bf16";
  ActLayout act_layout = ActLayout::MEGATRON;
  Cluster cluster;  // homogeneous
  Assumptions assume;
  // Measured per-layer times and memory (`baton plan --profile`) instead of the analytical ones,
  // scaled to each layout's micro-batch, tp and recomputation as profile.h says.
  std::shared_ptr<const MeasuredProfile> profile;
};

struct Prediction {
  Layout layout;
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;     // model FLOPs (72·B·s·l·h²(...), the metrics formula)
  double hw_tflops_per_gpu = 0;  // FLOPs executed, recomputation included (PTD-P Eq. 4.2 for full)
  double bubble_fraction = 0;
  std::vector<double> memory_gb;  // per pipeline rank
  bool fits = true;               // every rank within the device memory
  bool simulated = false;         // pipeline time from the simulator (else the closed form)
  double pipeline_s = 0, dp_comm_s = 0, optimizer_s = 0;  // parts of the step time
  double compute_s = 0;  // m × the busiest rank's f + b per micro-batch (tp all-reduces included,
                         // pipeline transfers not)
};

// Checks the divisibility rules; returns "" or what is violated.
std::string layout_problem(const PtdpProblem& pb, const Layout& l);

// Predicts one layout. `simulate`: cost the pipeline with src/pipeline's simulator (exact for the
// generated schedule) instead of the closed form; falls back to the closed form for programs of
// more than `max_sim_instrs` instructions.
Prediction evaluate(const PtdpProblem& pb, const Layout& l, bool simulate = true,
                    long max_sim_instrs = 2'000'000);

// The schedule kinds the planner can cost, in registry order (gpipe, 1f1b, interleaved, 2bw).
std::vector<std::string> costed_schedules();
// The search's default space: the costed kinds that are synchronous (flush: W(t+1) = W(t) −
// lr·∇f(W(t)), the semantics of data parallelism). Asynchronous kinds only when asked for.
std::vector<std::string> synchronous_schedules();
// The recomputation modes (parallel.recompute's values).
std::vector<std::string> recompute_modes();

// `--schedules` / `--recompute`: a comma-separated list, checked (Error + hint for an unknown kind
// or mode, a kind the planner cannot cost, an empty list); duplicates dropped, order kept.
// "all" as the schedule list is costed_schedules(), asynchronous kinds included.
std::vector<std::string> parse_schedule_list(const std::string& csv);
std::vector<std::string> parse_recompute_list(const std::string& csv);

struct SearchOptions {
  int top_k = 5;
  bool sequence_parallel = false;
  bool scatter_gather = true;  // used where it applies: pp > 1, tp > 1, no sequence parallelism
  bool zero1 = false;
  std::vector<std::string> schedules = synchronous_schedules();
  std::vector<std::string> recompute = recompute_modes();
};

// Every valid layout within the options (micro-batches 1, 2, 4, ... up to global_batch / dp) that fits, fastest first (closed form; equal times: less
// memory first), then the best `top_k` re-costed with the simulator and re-sorted. Throws Error for
// options naming unknown or uncostable kinds or modes.
std::vector<Prediction> search(const PtdpProblem& pb, const SearchOptions& opt);

// Peak (stage, micro-batch) stashes on pipeline rank r under `kind` (closed form of
// pipeline::memory_peaks for the generators of src/pipeline; tested against it). `kind` must be
// one of costed_schedules().
int peak_stashes(const std::string& kind, int pp, int vp, int m, int r);
// Closed-form makespan of one step of a flush schedule with per-model-stage costs fb[s] = f + b,
// per-hop transfer time c (notes-dissertation §1.2, §1.6, Eq. 4.1 generalised to unequal stages);
// for an asynchronous kind, one batch's steady-state time. `kind` must be one of costed_schedules().
double closed_form_makespan(const std::string& kind, int pp, int vp, int m,
                            const std::vector<double>& fb, double c);

}  // namespace baton::plan
