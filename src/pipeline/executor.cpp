// The pipeline executor; see executor.h for the contract and the invariants it relies on.
#include "pipeline/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "core/error.h"
#include "pipeline/schedules.h"
#include "pipeline/simulate.h"
#include "pipeline/validate.h"

namespace baton::pipeline {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool is_recv(Op op) { return op == Op::RECV_ACT || op == Op::RECV_GRAD; }

}  // namespace

int Executor::tag(bool gradient, int stage, int microbatch, int num_stages) {
  return static_cast<int>(((int64_t(microbatch) * num_stages + stage) * 2 + (gradient ? 1 : 0)) % 32768);
}

Executor::Executor(Program program, int rank, dist::Comm& comm)
    : program_(std::move(program)), rank_(rank), comm_(comm) {
  const ScheduleSpec& spec = program_.spec;
  BATON_REQUIRE(is_flush_kind(spec.kind),
                fmt::format("parallel.schedule = \"{}\" is not executable yet", spec.kind),
                "the executor runs the flush schedules gpipe, 1f1b, interleaved and zb-h1; the "
                "asynchronous pipedream and 2bw (weight stashing) are not built yet");
  BATON_ASSERT(program_.lowered, "the executor runs lowered programs");
  BATON_ASSERT(spec.steps == 1, "the executor runs one optimizer step per run (steps = {})", spec.steps);
  BATON_ASSERT(program_.num_ranks() == comm.size(), "program for {} ranks on a group of {}",
               program_.num_ranks(), comm.size());
  BATON_ASSERT(rank >= 0 && rank < comm.size() && rank == comm.rank(), "rank {} of {}", rank, comm.size());
  check_valid(program_);
  slots_ = std::max(1, memory_peaks(program_).activations[rank_]);
  // When each receive may be posted: after the last earlier instruction on the same slot (whose
  // buffers it would otherwise overwrite while still in use).
  const std::vector<Instr>& list = instructions();
  post_after_.assign(list.size(), -1);
  for (size_t i = 0; i < list.size(); ++i) {
    if (!is_recv(list[i].op)) continue;
    for (int j = static_cast<int>(i) - 1; j >= 0; --j)
      if (list[j].slot == list[i].slot && list[j].slot >= 0) {
        post_after_[i] = j;
        break;
      }
  }
}

ExecStats Executor::run(Stage& stage) {
  const std::vector<Instr>& list = instructions();
  const int S = program_.num_stages();
  const int pp = program_.spec.pp;
  ExecStats st;
  st.fwd.assign(program_.spec.vp, 0);
  st.bwd.assign(program_.spec.vp, 0);
  st.fwd_count.assign(program_.spec.vp, 0);
  st.bwd_count.assign(program_.spec.vp, 0);
  const double t0 = now();

  std::vector<dist::RequestPtr> recv(list.size());          // posted receives, by instruction
  std::map<int, std::vector<dist::RequestPtr>> sends;       // in-flight sends, by slot
  std::vector<std::vector<int>> to_post(list.size() + 1);   // receives to post after instruction j
  for (size_t i = 0; i < list.size(); ++i)
    if (is_recv(list[i].op)) to_post[post_after_[i] + 1].push_back(static_cast<int>(i));

  auto post = [&](int i) {
    const Instr& in = list[i];
    const bool grad = in.op == Op::RECV_GRAD;
    const int from_stage = grad ? in.stage + 1 : in.stage - 1;  // the sender's stage
    const int boundary = grad ? in.stage : in.stage - 1;        // the boundary crossed
    float* buf = grad ? stage.output_grad(in.stage, in.slot) : stage.input(in.stage, in.slot);
    recv[i] = comm_.recv(buf, stage.boundary_floats(boundary), dist::DType::F32, in.peer,
                         tag(grad, from_stage, in.microbatch, S));
  };
  auto wait_sends = [&](int slot) {
    auto it = sends.find(slot);
    if (it == sends.end()) return;
    for (auto& r : it->second) r->wait();
    sends.erase(it);
  };
  auto chunk = [&](int s) { return s / pp; };

  for (int i : to_post[0]) post(i);
  for (size_t i = 0; i < list.size(); ++i) {
    const Instr& in = list[i];
    const double start = now();
    switch (in.op) {
      case Op::RECV_ACT:
      case Op::RECV_GRAD:
        recv[i]->wait();
        recv[i].reset();
        st.recv_wait += now() - start;
        break;
      case Op::SEND_ACT:
        sends[in.slot].push_back(comm_.send(stage.output(in.stage, in.slot),
                                            stage.boundary_floats(in.stage), dist::DType::F32,
                                            in.peer, tag(false, in.stage, in.microbatch, S)));
        break;
      case Op::SEND_GRAD:
        sends[in.slot].push_back(comm_.send(stage.input_grad(in.stage, in.slot),
                                            stage.boundary_floats(in.stage - 1), dist::DType::F32,
                                            in.peer, tag(true, in.stage, in.microbatch, S)));
        break;
      case Op::FWD:
        wait_sends(in.slot);  // the slot's previous output may still be on its way
        stage.forward(in.stage, in.microbatch, in.slot);
        st.fwd[chunk(in.stage)] += now() - start;
        st.fwd_count[chunk(in.stage)]++;
        break;
      case Op::BWD:
      case Op::BWD_INPUT:
      case Op::BWD_WEIGHT:
        wait_sends(in.slot);
        stage.backward(in.stage, in.microbatch, in.slot,
                       in.op == Op::BWD ? BackwardPart::FULL
                                        : in.op == Op::BWD_INPUT ? BackwardPart::INPUT
                                                                 : BackwardPart::WEIGHT);
        st.bwd[chunk(in.stage)] += now() - start;
        if (in.op != Op::BWD_WEIGHT) st.bwd_count[chunk(in.stage)]++;
        break;
      case Op::REDUCE_GRADS:
        // Flush: every message of the step has been sent; finish them before the collectives.
        while (!sends.empty()) wait_sends(sends.begin()->first);
        stage.reduce_grads(in.stage);
        st.update += now() - start;
        break;
      case Op::OPT_STEP:
        stage.optimizer_step(in.stage, in.weight_version);
        st.update += now() - start;
        break;
    }
    if (is_compute(in.op)) {
      st.compute += now() - start;
      st.last_compute_end = now() - t0;
    }
    for (int j : to_post[i + 1]) post(j);
  }
  while (!sends.empty()) wait_sends(sends.begin()->first);
  for (auto& r : recv) BATON_ASSERT(!r, "a receive was posted but never waited");
  st.total = now() - t0;
  return st;
}

void run_forward_only(Stage& stage, dist::Comm& comm, int pp, int vp, int microbatches) {
  const int S = pp * vp, rank = comm.rank();
  for (int k = 0; k < microbatches; ++k)
    for (int s = rank; s < S; s += pp) {
      if (s > 0)
        comm.recv(stage.input(s, 0), stage.boundary_floats(s - 1), dist::DType::F32, (s - 1) % pp,
                  Executor::tag(false, s - 1, k, S))->wait();
      stage.forward(s, k, 0);
      if (s + 1 < S)
        comm.send(stage.output(s, 0), stage.boundary_floats(s), dist::DType::F32, (s + 1) % pp,
                  Executor::tag(false, s, k, S))->wait();
    }
}

}  // namespace baton::pipeline
