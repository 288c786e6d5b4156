// Layout (DESIGN §3): where every rank of the job sits — its group (a data-parallel replica of the
// model, or one of HetPipe's virtual workers), its pipeline stage and stage replica, its
// tensor-parallel rank and the global layers it holds. It is built once (from the config, later
// from a planner's output) and is where rank ↔ stage arithmetic happens (within one pipeline it
// is core/pipeline_ranks.h's, which the pipeline IR shares, so the executor's peers agree with
// it): the communicators (make_process_groups), the model's chunks and the checkpoint shards all
// come from it. Pure data: no communicator, no model.
//
// A group is a pipeline of `pp` stages; each stage is `replicas[s]` consecutive pipeline ranks
// (PipeDream's 1F1B-RR; 1 each by default), each pipeline rank a tensor-parallel group of `tp`
// world ranks. With interleaving (vp > 1) pipeline stage r holds model stages r, r + pp, ...
// (PTD-P §1.6: chunk c of stage r is model stage c·pp + r). Model stage s holds the global layers
// `stages[s]` — the model's default split, or explicit boundaries of the user's.
//
// Rank order: in the homogeneous grid (every group the same pipeline) Megatron's — tp fastest,
// then the group (data-parallel rank), then the pipeline rank:
//   rank = tp_rank + tp · (group + groups · pipe_rank)
// Groups with pipelines of their own (different stage counts or boundaries) take consecutive
// blocks of tp · (their pipeline ranks) world ranks, tp fastest.
// Virtual workers (HetPipe's VWs, `Layout::virtual_workers`) are groups that never all-reduce with
// each other (they synchronise through WSP's parameter server or the wave all-reduce of their
// weights), so they are not data-parallel replicas even when their pipelines are equal, and each
// lists the world ranks of its stages in any order the user chose (hetero.virtual_workers).
// This is the one place that maps a rank to its (group, stage): everything else asks place().
#pragma once
#include <string>
#include <vector>

#include "core/layer_range.h"
#include "core/pipeline_ranks.h"

namespace baton::dist {

// One group's pipeline.
struct PipelineSpec {
  int pp = 1;                      // pipeline stages
  int vp = 1;                      // model chunks per stage (interleaved 1F1B)
  std::vector<LayerRange> stages;  // pp · vp model stages, in model-stage order, contiguous from 0
  std::vector<int> replicas;       // ranks per pipeline stage (1F1B-RR); empty = one each

  // The pipeline's rank ↔ stage arithmetic (core/pipeline_ranks.h, shared with the pipeline IR).
  PipelineRanks ranks_layout() const { return {.pp = pp, .vp = vp, .replicas = replicas}; }
  int replicas_of(int stage) const { return ranks_layout().replicas_of(stage); }
  int ranks() const { return ranks_layout().ranks(); }  // Σ replicas (pp without replication)
  int num_layers() const { return stages.empty() ? 0 : stages.back().end; }
  bool operator==(const PipelineSpec&) const = default;
};

// Where one world rank sits.
struct RankPlace {
  int group = 0;      // its pipeline (data-parallel rank in the homogeneous grid)
  int pipe_rank = 0;  // its rank in the group's pipeline (0 .. ranks() − 1)
  int stage = 0;      // its pipeline stage (0 .. pp − 1)
  int replica = 0;    // which replica of that stage
  int tp_rank = 0;
  std::vector<int> model_stages;    // stage + c·pp for c < vp
  std::vector<LayerRange> chunks;   // the global layers of those model stages
};

class Layout {
 public:
  // Throws baton::Error (what + hint) for a pipeline that does not describe a valid split of
  // `num_layers` global layers (empty stage, gap, overlap, wrong count, ...).
  // The homogeneous grid: `dp` groups with the same pipeline.
  static Layout grid(int tp, int dp, const PipelineSpec& pipeline);
  // Groups with pipelines of their own, in rank order.
  static Layout groups(int tp, const std::vector<PipelineSpec>& pipelines);
  // HetPipe's virtual workers: group g is pipelines[g] on the world ranks ranks[g] (one per
  // pipeline rank, in stage order; tp = 1); every rank of 0 .. world − 1 in exactly one group.
  // Throws Error naming the rank that is placed twice or left out.
  static Layout virtual_workers(const std::vector<PipelineSpec>& pipelines,
                                const std::vector<std::vector<int>>& ranks);

  int world() const { return static_cast<int>(places_.size()); }
  int tp() const { return tp_; }
  int num_groups() const { return static_cast<int>(pipelines_.size()); }
  // Every group runs the same pipeline: the groups are data-parallel replicas (gradients are
  // all-reduced over them) and dp_ranks() exists.
  bool homogeneous() const { return homogeneous_; }
  // The groups are virtual workers (Layout::virtual_workers).
  bool virtual_workers() const { return !rank_table_.empty(); }
  int dp() const { return homogeneous_ ? num_groups() : 1; }
  const PipelineSpec& pipeline(int group) const { return pipelines_[group]; }
  const RankPlace& place(int rank) const { return places_[rank]; }
  int rank_of(int group, int pipe_rank, int tp_rank) const;
  // The pipeline rank of replica `replica` of `stage` in `group`.
  int pipe_rank_of(int group, int stage, int replica) const;

  // Members of `rank`'s groups, as world ranks in group-rank order.
  std::vector<int> tp_ranks(int rank) const;       // its tensor-parallel group
  std::vector<int> pipe_ranks(int rank) const;     // its pipeline: same group and tp rank
  std::vector<int> dp_ranks(int rank) const;       // same place in every group (homogeneous only)
  std::vector<int> replica_ranks(int rank) const;  // the replicas of its stage (1F1B-RR)
  std::vector<int> group_ranks(int rank) const;    // every rank of its group
  // The ranks that hold one of the global `layers` (layers that share parameters) in `rank`'s
  // pipeline, with its tp rank and its replica index (replica j of the first stage pairs with
  // replica j of the last, 1F1B-RR): they sum the shared parameters' gradients. Empty when `rank`
  // holds none of them or all of them are on `rank`.
  std::vector<int> tied_ranks(int rank, const std::vector<int>& layers) const;

  // "tp 2 x dp 2 x pp 2" (homogeneous), with replicas and explicit boundaries when present.
  std::string describe() const;

 private:
  void place_all();
  int tp_ = 1;
  bool homogeneous_ = true;
  std::vector<PipelineSpec> pipelines_;
  std::vector<int> group_first_;  // first world rank of each group (heterogeneous order)
  std::vector<std::vector<int>> rank_table_;  // virtual workers: each group's world ranks by pipeline rank
  std::vector<RankPlace> places_;
};

// Checks a pipeline against a model of `num_layers` global layers; throws Error (what + hint).
void check_pipeline(const PipelineSpec& p, int num_layers);

}  // namespace baton::dist
