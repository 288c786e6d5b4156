#include "core/pipeline_ranks.h"

#include <numeric>

#include "core/error.h"

namespace baton {

int PipelineRanks::ranks() const {
  return replicas.empty() ? pp : std::accumulate(replicas.begin(), replicas.end(), 0);
}

int PipelineRanks::first_rank(int stage) const {
  BATON_ASSERT(stage >= 0 && stage < pp, "pipeline stage {} of {}", stage, pp);
  return replicas.empty() ? stage : std::accumulate(replicas.begin(), replicas.begin() + stage, 0);
}

int PipelineRanks::stage_of(int rank) const {
  BATON_ASSERT(rank >= 0 && rank < ranks(), "pipeline rank {} of {}", rank, ranks());
  int s = 0;
  while (rank >= first_rank(s) + replicas_of(s)) ++s;
  return s;
}

int PipelineRanks::rank_of(int model_stage, int microbatch) const {
  BATON_ASSERT(model_stage >= 0 && model_stage < pp * vp, "model stage {} of {}", model_stage, pp * vp);
  const int stage = model_stage % pp;
  return first_rank(stage) + (microbatch < 0 ? 0 : microbatch % replicas_of(stage));
}

std::vector<int> PipelineRanks::model_stages(int rank) const {
  std::vector<int> out;
  for (int c = 0; c < vp; ++c) out.push_back(model_stage(stage_of(rank), c));
  return out;
}

}  // namespace baton
