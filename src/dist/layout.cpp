// Layout: rank ↔ (group, stage, replica, tp rank, layers); see layout.h.
#include "dist/layout.h"

#include <algorithm>

#include "core/error.h"

namespace baton::dist {

void check_pipeline(const PipelineSpec& p, int num_layers) {
  BATON_REQUIRE(p.pp >= 1 && p.vp >= 1,
                fmt::format("a pipeline needs pp >= 1 and vp >= 1, got pp {} vp {}", p.pp, p.vp),
                "set parallel.pp and parallel.vp to positive integers");
  BATON_REQUIRE(static_cast<int>(p.stages.size()) == p.pp * p.vp,
                fmt::format("{} stage boundaries for pp × vp = {} × {} = {} model stages",
                            p.stages.size(), p.pp, p.vp, p.pp * p.vp),
                "give one [first, end) range of global layers per model stage (pp × vp of them)");
  int next = 0;
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const LayerRange& r = p.stages[s];
    BATON_REQUIRE(r.begin == next && r.end > r.begin,
                  fmt::format("model stage {} holds layers [{}, {}): stages must be non-empty and "
                              "contiguous, stage {} starting at layer {}", s, r.begin, r.end, s, next),
                  "stage boundaries are [first, end) ranges of global layers that follow each other "
                  "from 0, e.g. [[0, 5], [5, 12]]");
    next = r.end;
  }
  BATON_REQUIRE(next == num_layers,
                fmt::format("the stages cover global layers [0, {}) but the model has {}", next, num_layers),
                fmt::format("the last stage must end at layer {} (a GPT has n_layer + 2 global layers: "
                            "the embedding, the blocks and the head)", num_layers));
  if (!p.replicas.empty()) {
    BATON_REQUIRE(static_cast<int>(p.replicas.size()) == p.pp,
                  fmt::format("{} replica counts for {} pipeline stages", p.replicas.size(), p.pp),
                  "give one replica count per pipeline stage");
    for (int r : p.replicas)
      BATON_REQUIRE(r >= 1, fmt::format("a stage with {} replicas", r), "every stage needs at least one rank");
    BATON_REQUIRE(p.vp == 1, "replicated stages with interleaving (vp > 1) are not supported",
                  "use vp = 1 with replicas");
  }
}

Layout Layout::grid(int tp, int dp, const PipelineSpec& pipeline) {
  BATON_REQUIRE(tp >= 1 && dp >= 1, fmt::format("layout tp {} x dp {}: both must be >= 1", tp, dp),
                "launch tp × pp × dp ranks");
  check_pipeline(pipeline, pipeline.num_layers());
  Layout l;
  l.tp_ = tp;
  l.homogeneous_ = true;
  l.pipelines_.assign(dp, pipeline);
  l.place_all();
  return l;
}

Layout Layout::groups(int tp, const std::vector<PipelineSpec>& pipelines) {
  BATON_REQUIRE(tp >= 1 && !pipelines.empty(), "a layout needs tp >= 1 and at least one group",
                "describe at least one pipeline");
  for (const PipelineSpec& p : pipelines) {
    check_pipeline(p, p.num_layers());
    BATON_REQUIRE(p.num_layers() == pipelines.front().num_layers(),
                  fmt::format("groups split models of {} and {} layers", pipelines.front().num_layers(),
                              p.num_layers()),
                  "every group trains the same model: its stages must cover the same layers");
  }
  Layout l;
  l.tp_ = tp;
  l.pipelines_ = pipelines;
  l.homogeneous_ = std::all_of(pipelines.begin(), pipelines.end(),
                               [&](const PipelineSpec& p) { return p == pipelines.front(); });
  if (!l.homogeneous_) {
    int first = 0;
    for (const PipelineSpec& p : pipelines) {
      l.group_first_.push_back(first);
      first += tp * p.ranks();
    }
  }
  l.place_all();
  return l;
}

Layout Layout::virtual_workers(const std::vector<PipelineSpec>& pipelines,
                               const std::vector<std::vector<int>>& ranks) {
  BATON_REQUIRE(!pipelines.empty() && pipelines.size() == ranks.size(),
                fmt::format("{} virtual workers with {} rank lists", pipelines.size(), ranks.size()),
                "give every virtual worker its ranks, one per stage");
  Layout l = groups(1, pipelines);
  l.homogeneous_ = false;  // virtual workers never all-reduce gradients with each other
  l.group_first_.clear();
  size_t world = 0;
  for (size_t g = 0; g < pipelines.size(); ++g) {
    BATON_REQUIRE(static_cast<int>(ranks[g].size()) == pipelines[g].ranks(),
                  fmt::format("virtual worker {} lists {} ranks for a pipeline of {}", g, ranks[g].size(),
                              pipelines[g].ranks()),
                  "list one rank per stage");
    world += ranks[g].size();
  }
  std::vector<int> owner(world, -1);
  for (size_t g = 0; g < ranks.size(); ++g)
    for (int r : ranks[g]) {
      BATON_REQUIRE(r >= 0 && static_cast<size_t>(r) < world,
                    fmt::format("virtual worker {} names rank {}, but the virtual workers have {} ranks in all", g,
                                r, world),
                    fmt::format("name each of ranks 0..{} once", world - 1));
      BATON_REQUIRE(owner[static_cast<size_t>(r)] < 0,
                    fmt::format("rank {} is in virtual workers {} and {}", r, owner[static_cast<size_t>(r)], g),
                    "name every rank in one virtual worker only");
      owner[static_cast<size_t>(r)] = static_cast<int>(g);
    }
  l.rank_table_ = ranks;
  l.place_all();
  return l;
}

int Layout::pipe_rank_of(int group, int stage, int replica) const {
  const PipelineSpec& p = pipelines_[group];
  BATON_ASSERT(stage >= 0 && stage < p.pp && replica >= 0 && replica < p.replicas_of(stage),
               "stage {} replica {} outside the pipeline", stage, replica);
  return p.ranks_layout().first_rank(stage) + replica;
}

int Layout::rank_of(int group, int pipe_rank, int tp_rank) const {
  BATON_ASSERT(group >= 0 && group < num_groups() && tp_rank >= 0 && tp_rank < tp_ && pipe_rank >= 0 &&
                   pipe_rank < pipelines_[group].ranks(),
               "(group {}, pipeline rank {}, tp rank {}) outside the layout", group, pipe_rank, tp_rank);
  if (!rank_table_.empty()) return rank_table_[group][pipe_rank];  // tp = 1
  if (homogeneous_) return tp_rank + tp_ * (group + num_groups() * pipe_rank);
  return group_first_[group] + tp_rank + tp_ * pipe_rank;
}

void Layout::place_all() {
  int world = 0;
  for (const PipelineSpec& p : pipelines_) world += tp_ * p.ranks();
  places_.assign(world, RankPlace{});
  std::vector<bool> seen(world, false);
  for (int g = 0; g < num_groups(); ++g) {
    const PipelineSpec& p = pipelines_[g];
    for (int stage = 0; stage < p.pp; ++stage)
      for (int rep = 0; rep < p.replicas_of(stage); ++rep)
        for (int t = 0; t < tp_; ++t) {
          const int pr = pipe_rank_of(g, stage, rep), rank = rank_of(g, pr, t);
          BATON_ASSERT(!seen[rank], "rank {} placed twice", rank);
          seen[rank] = true;
          RankPlace& pl = places_[rank];
          pl = RankPlace{.group = g, .pipe_rank = pr, .stage = stage, .replica = rep, .tp_rank = t};
          pl.model_stages = p.ranks_layout().model_stages(pr);
          for (int s : pl.model_stages) pl.chunks.push_back(p.stages[s]);
        }
  }
}

namespace {
template <typename Pred>
std::vector<int> select(const std::vector<RankPlace>& places, Pred keep) {
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(places.size()); ++r)
    if (keep(places[r])) out.push_back(r);
  return out;
}
}  // namespace

std::vector<int> Layout::tp_ranks(int rank) const {
  const RankPlace& me = place(rank);
  std::vector<int> out;
  for (int t = 0; t < tp_; ++t) out.push_back(rank_of(me.group, me.pipe_rank, t));
  return out;
}

std::vector<int> Layout::pipe_ranks(int rank) const {
  const RankPlace& me = place(rank);
  std::vector<int> out;
  for (int pr = 0; pr < pipelines_[me.group].ranks(); ++pr) out.push_back(rank_of(me.group, pr, me.tp_rank));
  return out;
}

std::vector<int> Layout::dp_ranks(int rank) const {
  const RankPlace& me = place(rank);
  if (!homogeneous_) return {rank};
  std::vector<int> out;
  for (int g = 0; g < num_groups(); ++g) out.push_back(rank_of(g, me.pipe_rank, me.tp_rank));
  return out;
}

std::vector<int> Layout::replica_ranks(int rank) const {
  const RankPlace& me = place(rank);
  std::vector<int> out;
  for (int j = 0; j < pipelines_[me.group].replicas_of(me.stage); ++j)
    out.push_back(rank_of(me.group, pipe_rank_of(me.group, me.stage, j), me.tp_rank));
  return out;
}

std::vector<int> Layout::group_ranks(int rank) const {
  const int g = place(rank).group;
  return select(places_, [g](const RankPlace& p) { return p.group == g; });
}

std::vector<int> Layout::tied_ranks(int rank, const std::vector<int>& layers) const {
  const RankPlace& me = place(rank);
  auto holds = [&layers](const RankPlace& p) {
    for (const LayerRange& c : p.chunks)
      for (int g : layers)
        if (c.contains(g)) return true;
    return false;
  };
  if (!holds(me)) return {};
  std::vector<int> out = select(places_, [&](const RankPlace& p) {
    return p.group == me.group && p.tp_rank == me.tp_rank && p.replica == me.replica && holds(p);
  });
  // pipe_rank order = pipeline order; a single holder shares with nobody.
  std::sort(out.begin(), out.end(), [&](int a, int b) { return place(a).pipe_rank < place(b).pipe_rank; });
  if (out.size() == 1) return {};
  return out;
}

std::string Layout::describe() const {
  auto stages_of = [](const PipelineSpec& p) {
    std::string s;
    for (const LayerRange& r : p.stages) s += fmt::format("{}[{},{})", s.empty() ? "" : " ", r.begin, r.end);
    return s;
  };
  if (homogeneous_) {
    const PipelineSpec& p = pipelines_.front();
    std::string out = fmt::format("tp {} x dp {} x pp {}", tp_, num_groups(), p.ranks());
    if (!p.replicas.empty())
      out += fmt::format(" ({} stages, replicas {})", p.pp, fmt::join(p.replicas, ","));
    return out;
  }
  if (virtual_workers()) {
    std::string out = fmt::format("{} virtual workers:", num_groups());
    for (int g = 0; g < num_groups(); ++g)
      out += fmt::format(" | vw {}: ranks {}, layers {}", g, fmt::join(rank_table_[g], ","),
                         stages_of(pipelines_[g]));
    return out;
  }
  std::string out = fmt::format("tp {}, {} groups:", tp_, num_groups());
  for (int g = 0; g < num_groups(); ++g)
    out += fmt::format(" | group {}: pp {} layers {}", g, pipelines_[g].pp, stages_of(pipelines_[g]));
  return out;
}

}  // namespace baton::dist
