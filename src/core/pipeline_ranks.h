// The rank ↔ stage arithmetic of one pipeline (DESIGN §3), in one place: the Layout
// (dist/layout.h), which places pipelines on the world's ranks, and the pipeline IR
// (pipeline/instr.h), whose programs name their peers by pipeline rank, both use it.
//
// A pipeline has `pp` stages; stage s runs on `replicas[s]` consecutive pipeline ranks (PipeDream's
// 1F1B-RR; one each when empty), and each stage holds `vp` model chunks: model stage c·pp + s is
// chunk c of stage s (PTD-P §1.6). Micro-batch k of a replicated stage runs on replica k mod r_s
// (deterministic round-robin by id, notes-pipedream §1).
#pragma once
#include <vector>

namespace baton {

struct PipelineRanks {
  int pp = 1;
  int vp = 1;
  std::vector<int> replicas;

  int replicas_of(int stage) const { return replicas.empty() ? 1 : replicas[stage]; }
  int ranks() const;                       // pipeline ranks: Σ replicas (pp without replication)
  int first_rank(int stage) const;         // the pipeline rank of replica 0 of pipeline `stage`
  int stage_of(int rank) const;            // the pipeline stage pipeline `rank` runs
  int replica_of(int rank) const { return rank - first_rank(stage_of(rank)); }
  int model_stage(int stage, int chunk) const { return chunk * pp + stage; }
  // The pipeline rank that runs `microbatch` (< 0: replica 0) of model stage `model_stage`.
  int rank_of(int model_stage, int microbatch) const;
  // The model stages pipeline `rank` holds, ascending (one per chunk).
  std::vector<int> model_stages(int rank) const;
};

}  // namespace baton
