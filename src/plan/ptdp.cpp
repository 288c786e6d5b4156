// PTD-P layout search and prediction (ptdp.h).
#include "plan/ptdp.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/simulate.h"

namespace baton::plan {

namespace {

using pipeline::ScheduleTraits;

// The order of forwards and backwards on a rank that a closed form below assumes. This is the one
// thing the planner knows about a kind beyond its registry traits; a kind without an entry here is
// one the planner cannot cost (pipedream: an update per micro-batch, the stashed versions and a
// data-parallel all-reduce per micro-batch are not modelled; zb-h1: the split backward is not).
enum class Order {
  ALL_FORWARDS_FIRST,  // GPipe: every micro-batch's forward, then every backward
  ONE_F_ONE_B,         // warm-up forwards, then one forward and one backward (PipeDream-Flush,
                       // PTD-P's interleaved 1F1B, PipeDream-2BW)
};
struct CostedKind {
  std::string_view kind;
  Order order;
};
constexpr CostedKind kCosted[] = {{"gpipe", Order::ALL_FORWARDS_FIRST},
                                  {"1f1b", Order::ONE_F_ONE_B},
                                  {"interleaved", Order::ONE_F_ONE_B},
                                  {"2bw", Order::ONE_F_ONE_B}};

const CostedKind* costed(std::string_view kind) {
  for (const CostedKind& c : kCosted)
    if (c.kind == kind) return &c;
  return nullptr;
}

// The registry's traits of `kind`, or null for a name the registry does not know.
const ScheduleTraits* traits_of(std::string_view kind) {
  for (const ScheduleTraits& t : pipeline::schedule_registry())
    if (t.name == kind) return &t;
  return nullptr;
}

// A kind the planner costs: its traits and order; Error + hint otherwise.
std::pair<const ScheduleTraits*, Order> costed_traits(const std::string& kind) {
  const CostedKind* c = costed(kind);
  BATON_REQUIRE(c, fmt::format("the planner has no cost model for schedule '{}'", kind),
                fmt::format("the planner costs {}", fmt::join(costed_schedules(), ", ")));
  return {&pipeline::schedule_traits(kind), c->order};
}

std::vector<std::string> split_csv(const std::string& csv) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= csv.size()) {
    const size_t comma = std::min(csv.find(',', pos), csv.size());
    std::string item = csv.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty() && std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
    pos = comma + 1;
  }
  return out;
}

// The checks behind parse_*_list and search(): every entry known and usable, at least one.
void check_schedules(const std::vector<std::string>& kinds) {
  const std::string usable = fmt::format("{}", fmt::join(costed_schedules(), ","));
  BATON_REQUIRE(!kinds.empty(), "the search was given no schedule kinds",
                fmt::format("name one or more of {} (e.g. --schedules 1f1b,interleaved)", usable));
  for (const std::string& k : kinds) {
    const ScheduleTraits* t = traits_of(k);
    BATON_REQUIRE(t, fmt::format("unknown schedule kind '{}' in the search's schedules", k),
                  fmt::format("the planner searches over {} (e.g. --schedules 1f1b,interleaved, or "
                              "all)", usable));
    BATON_REQUIRE(costed(k),
                  fmt::format("the planner has no cost model for schedule '{}' ({})", k, t->summary),
                  fmt::format("search over {}; `baton schedule --kind {}` simulates it", usable, k));
  }
}

void check_recompute(const std::vector<std::string>& modes) {
  const auto all = recompute_modes();
  const std::string valid = fmt::format("{}", fmt::join(all, ","));
  BATON_REQUIRE(!modes.empty(), "the search was given no recompute modes",
                fmt::format("name one or more of {} (e.g. --recompute full)", valid));
  for (const std::string& r : modes)
    BATON_REQUIRE(std::find(all.begin(), all.end(), r) != all.end(),
                  fmt::format("unknown recompute mode '{}' in the search's recompute modes", r),
                  fmt::format("use a subset of {} (e.g. --recompute full)", valid));
}

}  // namespace

std::vector<std::string> costed_schedules() {
  std::vector<std::string> out;
  for (const ScheduleTraits& t : pipeline::schedule_registry())
    if (costed(t.name)) out.emplace_back(t.name);
  return out;
}

std::vector<std::string> synchronous_schedules() {
  std::vector<std::string> out;
  for (const std::string& k : costed_schedules())
    if (pipeline::schedule_traits(k).synchronous()) out.push_back(k);
  return out;
}

std::vector<std::string> recompute_modes() { return {"none", "selective", "full"}; }

std::vector<std::string> parse_schedule_list(const std::string& csv) {
  if (csv == "all") return costed_schedules();
  auto kinds = split_csv(csv);
  check_schedules(kinds);
  return kinds;
}

std::vector<std::string> parse_recompute_list(const std::string& csv) {
  auto modes = split_csv(csv);
  check_recompute(modes);
  return modes;
}

int peak_stashes(const std::string& kind, int pp, int vp, int m, int r) {
  const auto [t, order] = costed_traits(kind);
  if (order == Order::ALL_FORWARDS_FIRST) return m;
  if (t->interleaving && vp > 1) return std::min((pp - r - 1) * 2 + (vp - 1) * pp + 1, m * vp);
  return std::min(pp - r, m);  // 1F1B order: stage r admits p − r before its first B
}

double closed_form_makespan(const std::string& kind, int pp, int vp, int m,
                            const std::vector<double>& fb, double c) {
  const auto [t, order] = costed_traits(kind);
  std::vector<double> rank(pp, 0.0);
  for (size_t s = 0; s < fb.size(); ++s) rank[s % pp] += fb[s];
  const double mx = *std::max_element(rank.begin(), rank.end());
  const double sum = std::accumulate(rank.begin(), rank.end(), 0.0);
  if (!t->synchronous()) return m * mx;  // steady state: no flush, no bubble per step
  if (pp == 1) return m * mx;
  if (t->interleaving && vp > 1) {
    // (p − 1)/v stage-times of fill and drain (Table 7.1); the first micro-batch's activation
    // crosses all p·v − 1 chunk boundaries and its gradient comes back: 2(pv − 1) hops. The
    // deep warm-up hides the hops in the steady state.
    return m * mx + (sum - mx) / vp + 2.0 * (pp * vp - 1) * c;
  }
  if (order == Order::ALL_FORWARDS_FIRST) return m * mx + (sum - mx) + 2.0 * (pp - 1) * c;
  // 1F1B: stage 0 has p micro-batches in flight; one round trip through the pipeline takes
  // Σ(f + b) + 2(p − 1) hops, so the steady-state period is at least that over p.
  const double period = std::max(mx, (sum + 2.0 * (pp - 1) * c) / pp);
  return m * period + (sum - mx) + 2.0 * (pp - 2) * c;
}

std::string layout_problem(const PtdpProblem& pb, const Layout& l) {
  const auto& g = pb.shape;
  const int N = pb.cluster.total_gpus();
  if (l.tp < 1 || l.pp < 1 || l.vp < 1 || l.micro_batch < 1 || l.dp < 1) return "sizes must be >= 1";
  if (g.n_head % l.tp) return fmt::format("tp {} does not divide n_head {}", l.tp, g.n_head);
  if (pb.cluster.gpus_per_node() % l.tp)
    return fmt::format("tp {} does not divide the {} GPUs of a node", l.tp, pb.cluster.gpus_per_node());
  if (g.n_layer % (l.pp * l.vp))
    return fmt::format("pp × vp = {} does not divide n_layer {}", l.pp * l.vp, g.n_layer);
  if (l.tp * l.pp * l.dp != N)
    return fmt::format("tp × pp × dp = {} is not the {} GPUs", l.tp * l.pp * l.dp, N);
  if (pb.global_batch % (l.micro_batch * l.dp))
    return fmt::format("micro_batch × dp = {} does not divide global_batch {}", l.micro_batch * l.dp,
                       pb.global_batch);
  const auto rc = recompute_modes();
  if (std::find(rc.begin(), rc.end(), l.recompute) == rc.end())
    return fmt::format("unknown recompute '{}'", l.recompute);
  const ScheduleTraits* t = traits_of(l.schedule);
  if (!t) return fmt::format("unknown schedule '{}'", l.schedule);
  if (!costed(l.schedule)) return fmt::format("the planner does not cost schedule '{}'", l.schedule);
  const int m = pb.global_batch / (l.micro_batch * l.dp);
  if (l.vp > 1 && !t->interleaving)
    return fmt::format("vp > 1 needs an interleaving schedule, not '{}'", l.schedule);
  if (t->interleaving && (l.pp < 2 || l.vp < 2))
    return fmt::format("{} needs pp >= 2 and vp >= 2", l.schedule);
  if (t->interleaving && m % l.pp)
    return fmt::format("{} needs micro-batches {} to be a multiple of pp {}", l.schedule, m, l.pp);
  if (t->min_microbatches_pp && m < l.pp)
    return fmt::format("{} needs micro-batches {} >= pp {}", l.schedule, m, l.pp);
  if (!t->synchronous() && l.pp < 2)
    return fmt::format("{} ({} updates) needs pp >= 2", l.schedule, pipeline::update_rule_name(t->update));
  return "";
}

namespace {

struct Stage {
  double f = 0, b = 0;          // seconds per micro-batch, tp communication included
  double params = 0;            // on one GPU (tied weights once per rank, see below)
  double stash = 0, work = 0;   // bytes per micro-batch, transient bytes
  double out_bytes = 0;         // activation sent to the next stage
  bool has_first = false, has_last = false;
};

}  // namespace

Prediction evaluate(const PtdpProblem& pb, const Layout& l, bool simulate, long max_sim_instrs) {
  if (auto why = layout_problem(pb, l); !why.empty())
    throw Error(fmt::format("layout tp={} pp={} dp={} vp={} micro_batch={}: {}", l.tp, l.pp, l.dp,
                            l.vp, l.micro_batch, why),
                "change the config's parallel / train keys or the --gpus count");
  const auto& C = pb.cluster;
  const DeviceType& dev = C.nodes[0].device;
  const int gpn = C.gpus_per_node();
  const double inter_per_gpu = C.nodes[0].inter_gbs / gpn;
  const double intra = C.nodes[0].intra_gbs;
  const Assumptions& A = pb.assume;

  GptOptions go;
  go.micro_batch = l.micro_batch;
  go.tp = l.tp;
  go.sequence_parallel = l.sequence_parallel;
  go.recompute = l.recompute;
  go.layout = pb.act_layout;
  ModelDesc md = gpt_desc(pb.shape, go);
  std::vector<LayerTime> times(md.size());
  if (pb.profile) {
    check_profile(*pb.profile, pb.shape, pb.dtype);
    times = profiled_times(*pb.profile, pb.shape, go, dev, A, md);
  } else {
    for (int i = 0; i < md.size(); ++i) times[i] = layer_time(md.layers[i], dev, pb.dtype, A);
  }

  // Layers -> model stages: equal blocks per chunk, the embedding with the first, the head with
  // the last (Megatron's assignment).
  const int S = l.pp * l.vp, per = pb.shape.n_layer / S, L = md.size();
  std::vector<Stage> st(S);
  for (int i = 0; i < L; ++i) {
    const int s = i == 0 ? 0 : i == L - 1 ? S - 1 : (i - 1) / per;
    const auto& ld = md.layers[i];
    const LayerTime& t = times[i];
    // Tensor-parallel all-reduces stay inside a node (tp divides the GPUs of a node).
    st[s].f += t.fwd + allreduce_time(ld.tp_fwd_bytes, l.tp, intra);
    st[s].b += t.bwd + allreduce_time(ld.tp_bwd_bytes, l.tp, intra);
    st[s].params += ld.params;
    st[s].stash += ld.stash_bytes;
    st[s].work = std::max(st[s].work, ld.work_bytes);
    st[s].out_bytes = ld.out_bytes;
    if (i == 0) st[s].has_first = true;
    if (i == L - 1) st[s].has_last = true;
  }
  // Point-to-point between consecutive stages: across nodes when a stage's tp·dp ranks fill a
  // node (rank order tp, dp, pp); scatter/gather sends 1/tp of the tensor per NIC, then an
  // all-gather inside the node (notes-dissertation §2.5).
  const bool p2p_inter = l.tp * l.dp >= gpn;
  double hop_bytes = st[0].out_bytes;
  double hop = 0;
  if (l.pp > 1) {
    const double bw = p2p_inter ? inter_per_gpu : intra;
    if (l.scatter_gather && l.tp > 1)
      hop = transfer_time(hop_bytes / l.tp, bw) + transfer_time(hop_bytes * (l.tp - 1) / l.tp, intra);
    else
      hop = transfer_time(hop_bytes, bw);
  }
  const int m = pb.global_batch / (l.micro_batch * l.dp);

  Prediction p;
  p.layout = l;
  {
    std::vector<double> rank_fb(l.pp, 0.0);
    for (int s = 0; s < S; ++s) rank_fb[s % l.pp] += st[s].f + st[s].b;
    p.compute_s = m * *std::max_element(rank_fb.begin(), rank_fb.end());
  }
  // The transfers are on the critical path of every micro-batch, not only of the pipeline's fill:
  // PTD-P's implementation exchanges activations and gradients with blocking sends and receives,
  // and the paper measures what follows from that — the pipeline's point-to-point traffic grows
  // with the batch size, so the non-interleaved schedule catches up with the interleaved one (v
  // times the traffic) at larger batches, and without scatter/gather overtakes it; scatter/gather
  // gains most (up to 11%) at large batches with interleaving (notes-dissertation §1.6, §2.5;
  // dissertation §4.5.3, §4.5.7, Figs. 4.12, 4.18). So a stage spends one hop after each forward
  // it passes on and after each backward it passes back, and the message has then arrived.
  for (int s = 0; s < S; ++s) {
    if (s + 1 < S) st[s].f += hop;
    if (s > 0) st[s].b += hop;
  }
  std::vector<double> fb(S);
  for (int s = 0; s < S; ++s) fb[s] = st[s].f + st[s].b;
  const long instrs = long(S) * m * 6;
  // Synchronous kinds flush every step; the asynchronous ones the planner costs (costed_traits)
  // update once per batch without a flush (2BW), so one batch's time is the steady state's.
  const ScheduleTraits& traits = *costed_traits(l.schedule).first;
  const bool flush = traits.synchronous();
  if (simulate && instrs <= max_sim_instrs && l.pp > 1) {
    pipeline::ScheduleSpec spec;
    spec.kind = l.schedule;
    spec.pp = l.pp;
    spec.vp = l.vp;
    spec.microbatches = m;
    spec.steps = flush ? 1 : 3;
    const auto prog = pipeline::lower(pipeline::generate(spec));
    pipeline::Costs c;
    for (int s = 0; s < S; ++s) c.stage.push_back({st[s].f, st[s].b, 0});
    const auto r = pipeline::simulate(prog, c);  // sends arrive when their stage's op ends
    // No flush: the steady-state time of one batch, a third of three back-to-back batches.
    p.pipeline_s = flush ? r.makespan : r.makespan / 3;
    p.bubble_fraction = flush ? r.bubble_fraction : std::max(0.0, p.pipeline_s / (r.ideal / 3) - 1);
    p.simulated = true;
  } else {
    p.pipeline_s = closed_form_makespan(l.schedule, l.pp, l.vp, m, fb, 0);  // hops are in fb
    std::vector<double> rank(l.pp, 0.0);
    for (int s = 0; s < S; ++s) rank[s % l.pp] += fb[s];
    const double ideal = m * *std::max_element(rank.begin(), rank.end());
    p.bubble_fraction = p.pipeline_s / ideal - 1;
  }

  // Per pipeline rank: parameters (tied embedding/head once when on one rank), memory.
  std::vector<double> params(l.pp, 0.0);
  std::vector<double> act(l.pp, 0.0), work(l.pp, 0.0);
  std::vector<bool> first(l.pp, false), last(l.pp, false);
  for (int s = 0; s < S; ++s) {
    const int r = s % l.pp;
    params[r] += st[s].params;
    act[r] = std::max(act[r], st[s].stash);  // the largest chunk bounds each live stash
    work[r] = std::max(work[r], st[s].work);
    first[r] = first[r] || st[s].has_first;
    last[r] = last[r] || st[s].has_last;
  }
  const double tied = md.layers.back().tied_to >= 0 ? md.layers[0].params - pb.shape.seq_len * double(pb.shape.d_model) : 0;
  const double state = state_bytes_per_param(pb.dtype, l.zero1, l.dp);
  const double version_bytes = pb.dtype == "fp32" ? 4 : 2;
  const int extra_versions = std::max(0, traits.weight_versions - 1);  // 2bw: the shadow version
  double dp_comm = 0, opt = 0;
  p.memory_gb.resize(l.pp);
  for (int r = 0; r < l.pp; ++r) {
    if (first[r] && last[r]) params[r] -= tied;
    // Data-parallel group: dp ranks spaced tp apart; k of them share a node.
    const int k = std::max(1, std::min(l.dp, gpn / l.tp));
    const double bw = l.tp * l.dp <= gpn ? intra : std::min(intra, k * inter_per_gpu);
    dp_comm = std::max(dp_comm, allreduce_time(params[r] * A.grad_bytes, l.dp, bw));
    opt = std::max(opt, params[r] * A.optimizer_bytes_per_param /
                            (l.zero1 ? l.dp : 1) / (dev.mem_bw_gbs * 1e9 * A.mem_efficiency));
    double bytes = params[r] * state;
    bytes += extra_versions * params[r] * version_bytes;
    bytes += peak_stashes(l.schedule, l.pp, l.vp, m, r) * act[r];
    bytes += work[r] + 4 * hop_bytes;  // recomputation scratch, send/receive buffers
    bytes += A.overhead_gb * 1e9;
    p.memory_gb[r] = bytes / 1e9;
    if (bytes > dev.memory_gb * 1e9) p.fits = false;
  }
  // Tied embedding/head gradients are all-reduced between the first and last stage (pp > 1).
  if (l.pp > 1) dp_comm += allreduce_time(tied * A.grad_bytes, 2, p2p_inter ? inter_per_gpu : intra);
  if (l.zero1 && l.dp > 1) dp_comm *= 1.0;  // reduce-scatter + all-gather moves the same bytes
  p.dp_comm_s = dp_comm;
  p.optimizer_s = opt;
  p.step_time_s = flush ? p.pipeline_s + dp_comm + opt : std::max(p.pipeline_s, dp_comm) + opt;

  const int N = C.total_gpus();
  const double B = pb.global_batch;
  p.tokens_per_s = B * md.tokens_per_sample / p.step_time_s;
  p.tflops_per_gpu = md.model_flops_per_sample * B / p.step_time_s / N / 1e12;
  p.hw_tflops_per_gpu = md.hardware_flops_per_sample * B / p.step_time_s / N / 1e12;
  return p;
}

std::vector<Prediction> search(const PtdpProblem& pb, const SearchOptions& opt) {
  const int N = pb.cluster.total_gpus();
  BATON_REQUIRE(pb.cluster.homogeneous(),
                fmt::format("cluster '{}' mixes device types or node sizes", pb.cluster.name),
                "the PTD-P search needs identical nodes; partition over mixed GPUs with --algorithm hetpipe");
  check_schedules(opt.schedules);
  check_recompute(opt.recompute);
  std::vector<Prediction> all;
  for (int tp = 1; tp <= pb.cluster.gpus_per_node(); ++tp) {
    for (int pp = 1; pp <= pb.shape.n_layer; ++pp) {
      if (N % (tp * pp)) continue;
      const int dp = N / (tp * pp);
      for (int mb = 1; mb <= pb.global_batch / dp; mb *= 2) {
        for (const auto& sched : opt.schedules) {
          std::vector<int> vps{1};
          if (pipeline::schedule_traits(sched).interleaving)
            for (int v = 2; v <= 8; ++v) vps.push_back(v);
          for (int vp : vps) {
            for (const auto& rc : opt.recompute) {
              // Scatter/gather splits inter-stage tensors over tp; sequence parallelism has them
              // split already (the trainer's rule, as Megatron's).
              const bool sp = opt.sequence_parallel && tp > 1;
              Layout l{tp, pp, dp, vp, mb, sched, rc, sp, opt.scatter_gather && tp > 1 && pp > 1 && !sp,
                       opt.zero1};
              if (!layout_problem(pb, l).empty()) continue;
              Prediction p = evaluate(pb, l, false);
              if (p.fits) all.push_back(std::move(p));
            }
          }
        }
      }
    }
  }
  auto max_mem = [](const Prediction& p) { return *std::max_element(p.memory_gb.begin(), p.memory_gb.end()); };
  auto better = [&](const Prediction& a, const Prediction& b) {
    if (a.step_time_s != b.step_time_s) return a.step_time_s < b.step_time_s;
    return max_mem(a) < max_mem(b);  // equal times (e.g. micro-batches in a linear model): less memory
  };
  std::sort(all.begin(), all.end(), better);
  // Without a pipeline (pp = 1) every kind with the same update rule runs the same step; keep the
  // first (least memory: 1f1b's one stash rather than gpipe's m).
  std::vector<Prediction> kept;
  for (auto& p : all) {
    const bool same_as_kept = p.layout.pp == 1 && std::any_of(kept.begin(), kept.end(), [&](const Prediction& q) {
      const Layout &a = p.layout, &b = q.layout;
      return b.pp == 1 && a.tp == b.tp && a.dp == b.dp && a.micro_batch == b.micro_batch &&
             a.recompute == b.recompute &&
             pipeline::schedule_traits(a.schedule).update == pipeline::schedule_traits(b.schedule).update;
    });
    if (!same_as_kept) kept.push_back(std::move(p));
    if (kept.size() >= size_t(std::max(1, opt.top_k)) * 2) break;
  }
  // Re-cost a few more than asked with the simulator, then keep the best top_k.
  for (auto& p : kept) p = evaluate(pb, p.layout, true);
  std::sort(kept.begin(), kept.end(), better);
  if (kept.size() > size_t(opt.top_k)) kept.resize(opt.top_k);
  return kept;
}

}  // namespace baton::plan
