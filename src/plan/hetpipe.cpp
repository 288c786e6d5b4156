// HetPipe partitioner and VW policies (hetpipe.h).
#include "plan/hetpipe.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace baton::plan {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

double link(const HpProblem& pb, int q1, int q2) {
  return pb.gpus[q1].node == pb.gpus[q2].node ? pb.intra_bw : pb.inter_bw;
}
}  // namespace

double hetpipe_stage_time(const HpProblem& pb, int q, int i, int j) {
  double t = 0;
  for (int l = i; l <= j; ++l) t += pb.layers[l].time[q];
  // Receive activations from q − 1 (forward) and the output gradient from q + 1 (backward).
  if (q > 0) t += pb.layers[i - 1].out_bytes / link(pb, q - 1, q);
  if (q + 1 < static_cast<int>(pb.gpus.size())) t += pb.layers[j].out_bytes / link(pb, q, q + 1);
  return t;
}

namespace {

std::vector<pipeline::LayerBytes> layer_bytes(const HpProblem& pb) {
  std::vector<pipeline::LayerBytes> b;
  for (const HpLayer& l : pb.layers) b.push_back(l.bytes);
  return b;
}

// Partition q of K holding layers [i, j] at the counts of its position.
pipeline::StageMemory stage_memory(const HpProblem& pb, const std::vector<pipeline::LayerBytes>& bytes,
                                   const pipeline::StageCounts& counts, int i, int j) {
  return pipeline::stage_memory(std::span(bytes).subspan(i, j - i + 1), i == 0,
                                j == static_cast<int>(bytes.size()) - 1, pb.memory, counts);
}

}  // namespace

pipeline::StageMemory hetpipe_stage_memory(const HpProblem& pb, int q, int i, int j) {
  const int K = static_cast<int>(pb.gpus.size());
  return stage_memory(pb, layer_bytes(pb), pipeline::hetpipe_stage_counts(K, pb.nm, q), i, j);
}

HpPlan hetpipe_partition(const HpProblem& pb) {
  const int L = static_cast<int>(pb.layers.size()), K = static_cast<int>(pb.gpus.size());
  BATON_REQUIRE(K >= 1 && L >= K, fmt::format("HetPipe needs at least one layer per GPU ({} layers, {} GPUs)", L, K),
                "use fewer GPUs per virtual worker");
  for (const auto& l : pb.layers)
    BATON_ASSERT(static_cast<int>(l.time.size()) == K, "layer times per GPU: {} != {}", l.time.size(), K);
  const std::vector<pipeline::LayerBytes> bytes = layer_bytes(pb);
  // Per position: the activation slots and weight versions of the hetpipe program at Nm.
  const std::vector<pipeline::StageCounts> counts = pipeline::hetpipe_stage_counts(K, pb.nm);
  auto memory = [&](int q, int i, int j) { return stage_memory(pb, bytes, counts[q], i, j); };
  // D[q][j]: best slowest-partition time placing layers 0..j on GPUs 0..q (GPU q ends at j).
  std::vector<std::vector<double>> D(K, std::vector<double>(L, kInf));
  std::vector<std::vector<int>> from(K, std::vector<int>(L, -1));
  for (int q = 0; q < K; ++q)
    for (int j = q; j < L - (K - 1 - q); ++j)
      for (int i = (q == 0 ? 0 : q); i <= j; ++i) {
        if (q == 0 && i != 0) break;
        const double prev = q == 0 ? 0 : D[q - 1][i - 1];
        if (prev == kInf) continue;
        if (double(memory(q, i, j).total()) > pb.gpus[q].memory_bytes) continue;
        const double v = std::max(prev, hetpipe_stage_time(pb, q, i, j));
        if (v < D[q][j]) D[q][j] = v, from[q][j] = i;
      }
  HpPlan plan;
  if (D[K - 1][L - 1] == kInf) return plan;
  plan.feasible = true;
  plan.slowest = D[K - 1][L - 1];
  plan.first_layer.assign(K + 1, L);
  for (int q = K - 1, j = L - 1; q >= 0; --q) {
    plan.first_layer[q] = from[q][j];
    j = from[q][j] - 1;
  }
  for (int q = 0; q < K; ++q) {
    plan.stage_time.push_back(hetpipe_stage_time(pb, q, plan.first_layer[q], plan.first_layer[q + 1] - 1));
    plan.stage_memory.push_back(memory(q, plan.first_layer[q], plan.first_layer[q + 1] - 1));
  }
  return plan;
}

int hetpipe_max_m(HpProblem pb, int bound) {
  pb.nm = 1;
  if (bound < 1 || !hetpipe_partition(pb).feasible) return 0;
  if (pb.gpus.size() == 1) return 1;
  auto fits = [&](int nm) {
    pb.nm = nm;
    return hetpipe_partition(pb).feasible;
  };
  // Doubling: lo fits, hi does not (or hi = bound + 1: everything up to the bound fits).
  int lo = 1, hi = 2;
  while (hi <= bound && fits(hi)) lo = hi, hi *= 2;
  hi = std::min(hi, bound + 1);
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

double hetpipe_minibatches_per_s(const HpProblem& pb, const HpPlan& plan) {
  if (!plan.feasible) return 0;
  const double round_trip = std::accumulate(plan.stage_time.begin(), plan.stage_time.end(), 0.0);
  return std::min(1 / plan.slowest, pb.nm / round_trip);
}

std::string vw_label(const Cluster& c, const VirtualWorker& vw) {
  std::string s;
  for (int n : vw.node) s += c.nodes[n].name.empty() ? '?' : c.nodes[n].name[0];
  return s;
}

std::vector<double> hetpipe_node_speed(const Cluster& c) {
  const bool measured = c.measured_speeds();
  std::vector<double> s;
  for (const Node& n : c.nodes) s.push_back(measured ? n.relative_speed : n.device.peak_fp32);
  return s;
}

std::vector<VirtualWorker> hetpipe_allocate(const Cluster& c, const std::string& policy, int k,
                                            const std::vector<double>& node_speed) {
  const int N = static_cast<int>(c.nodes.size());
  const int total = c.total_gpus();
  BATON_REQUIRE(k >= 1 && total % k == 0,
                fmt::format("{} GPUs do not split into virtual workers of {}", total, k),
                "choose k dividing the cluster's GPU count");
  std::vector<VirtualWorker> vws(total / k);
  if (policy == "np") {  // Node Partition: VW i = node i
    for (int n = 0; n < N; ++n)
      BATON_REQUIRE(c.nodes[n].gpus == k, fmt::format("NP needs {} GPUs per node; node {} has {}", k, n, c.nodes[n].gpus),
                    "NP makes one virtual worker per node");
    for (int n = 0; n < N; ++n) vws[n].node.assign(k, n);
  } else if (policy == "ed") {  // Equal Distribution: one GPU of every node per VW
    BATON_REQUIRE(N == k, fmt::format("ED needs k = number of nodes ({}), got {}", N, k),
                  "ED gives each virtual worker one GPU from every node");
    for (auto& vw : vws)
      for (int n = 0; n < N; ++n) vw.node.push_back(n);
  } else if (policy == "hd") {  // Hybrid Distribution: fastest type with slowest, ...
    BATON_REQUIRE(N % 2 == 0 && k % 2 == 0,
                  "HD pairs nodes and gives each virtual worker k/2 GPUs of each node of a pair",
                  "use an even number of nodes and an even k");
    std::vector<int> order(N);
    std::iota(order.begin(), order.end(), 0);
    BATON_REQUIRE(node_speed.empty() || static_cast<int>(node_speed.size()) == N,
                  fmt::format("HD needs one speed per node ({}), got {}", N, node_speed.size()), "");
    const std::vector<double> speed = node_speed.empty() ? hetpipe_node_speed(c) : node_speed;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return speed[a] > speed[b]; });
    size_t v = 0;
    for (int p = 0; p < N / 2; ++p) {
      const int fast = order[p], slow = order[N - 1 - p];
      BATON_REQUIRE(c.nodes[fast].gpus == c.nodes[slow].gpus && c.nodes[fast].gpus % (k / 2) == 0,
                    "HD needs paired nodes with equal GPU counts divisible by k/2", "");
      for (int g = 0; g < c.nodes[fast].gpus / (k / 2); ++g, ++v) {
        vws[v].node.assign(k / 2, fast);
        vws[v].node.insert(vws[v].node.end(), k / 2, slow);
      }
    }
  } else {
    throw Error(fmt::format("unknown HetPipe policy '{}'", policy), "use np, ed or hd");
  }
  return vws;
}

}  // namespace baton::plan
