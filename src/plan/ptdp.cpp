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

int peak_stashes(const std::string& kind, int pp, int vp, int m, int r) {
  if (kind == "gpipe") return m;
  if (kind == "interleaved" && vp > 1) return std::min((pp - r - 1) * 2 + (vp - 1) * pp + 1, m * vp);
  return std::min(pp - r, m);  // 1f1b, 2bw, pipedream: stage r admits p − r before its first B
}

double closed_form_makespan(const std::string& kind, int pp, int vp, int m,
                            const std::vector<double>& fb, double c) {
  std::vector<double> rank(pp, 0.0);
  for (size_t s = 0; s < fb.size(); ++s) rank[s % pp] += fb[s];
  const double mx = *std::max_element(rank.begin(), rank.end());
  const double sum = std::accumulate(rank.begin(), rank.end(), 0.0);
  if (kind == "2bw") return m * mx;  // steady state: no flush, no bubble per step
  if (pp == 1) return m * mx;
  if (kind == "interleaved" && vp > 1) {
    // (p − 1)/v stage-times of fill and drain (Table 7.1); the first micro-batch's activation
    // crosses all p·v − 1 chunk boundaries and its gradient comes back: 2(pv − 1) hops. The
    // deep warm-up hides the hops in the steady state.
    return m * mx + (sum - mx) / vp + 2.0 * (pp * vp - 1) * c;
  }
  if (kind == "gpipe") return m * mx + (sum - mx) + 2.0 * (pp - 1) * c;
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
  const int m = pb.global_batch / (l.micro_batch * l.dp);
  if (l.vp > 1 && l.schedule != "interleaved") return "vp > 1 needs the interleaved schedule";
  if (l.schedule == "interleaved" && (l.pp < 2 || l.vp < 2))
    return "interleaved needs pp >= 2 and vp >= 2";
  if (l.schedule == "interleaved" && m % l.pp)
    return fmt::format("interleaved needs micro-batches {} to be a multiple of pp {}", m, l.pp);
  if (l.schedule == "2bw" && m < l.pp) return fmt::format("2bw needs micro-batches {} >= pp {}", m, l.pp);
  if (l.recompute != "none" && l.recompute != "selective" && l.recompute != "full")
    return fmt::format("unknown recompute '{}'", l.recompute);
  for (const auto& k : {"1f1b", "gpipe", "interleaved", "2bw"})
    if (l.schedule == k) return "";
  return fmt::format("the planner does not cost schedule '{}'", l.schedule);
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
  std::vector<double> fb(S);
  for (int s = 0; s < S; ++s) fb[s] = st[s].f + st[s].b;
  {
    std::vector<double> rank_fb(l.pp, 0.0);
    for (int s = 0; s < S; ++s) rank_fb[s % l.pp] += fb[s];
    p.compute_s = m * *std::max_element(rank_fb.begin(), rank_fb.end());
  }
  const long instrs = long(S) * m * 6;
  const bool flush = l.schedule != "2bw";
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
    c.send_act.assign(S, hop);
    c.send_grad.assign(S, hop);
    const auto r = pipeline::simulate(prog, c);
    // 2bw: the steady-state time of one batch, the middle of three back-to-back batches' spacing.
    p.pipeline_s = flush ? r.makespan : r.makespan / 3;
    p.bubble_fraction = flush ? r.bubble_fraction : std::max(0.0, p.pipeline_s / (r.ideal / 3) - 1);
    p.simulated = true;
  } else {
    p.pipeline_s = closed_form_makespan(l.schedule, l.pp, l.vp, m, fb, hop);
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
    if (!flush) bytes += params[r] * version_bytes;  // 2bw: the shadow weight version
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
  std::vector<Prediction> all;
  for (int tp = 1; tp <= pb.cluster.gpus_per_node(); ++tp) {
    for (int pp = 1; pp <= pb.shape.n_layer; ++pp) {
      if (N % (tp * pp)) continue;
      const int dp = N / (tp * pp);
      for (int mb = 1; mb <= pb.global_batch / dp; mb *= 2) {
        for (const auto& sched : opt.schedules) {
          if (pp == 1 && sched != opt.schedules[0]) continue;  // no pipeline: one schedule
          std::vector<int> vps{1};
          if (sched == "interleaved") {
            vps.clear();
            for (int v = 2; v <= 8; ++v) vps.push_back(v);
          }
          for (int vp : vps) {
            for (const auto& rc : opt.recompute) {
              Layout l{tp, pp, dp, vp, mb, pp == 1 ? "1f1b" : sched, rc,
                       opt.sequence_parallel && tp > 1, opt.scatter_gather, opt.zero1};
              if (!layout_problem(pb, l).empty()) continue;
              Prediction p = evaluate(pb, l, false);
              if (p.fits) all.push_back(std::move(p));
            }
          }
        }
      }
    }
  }
  auto faster = [](const Prediction& a, const Prediction& b) { return a.step_time_s < b.step_time_s; };
  std::sort(all.begin(), all.end(), faster);
  // Re-cost a few more than asked with the simulator, then keep the best top_k.
  const size_t keep = std::min(all.size(), size_t(std::max(1, opt.top_k)) * 2);
  all.resize(keep);
  for (auto& p : all) p = evaluate(pb, p.layout, true);
  std::sort(all.begin(), all.end(), faster);
  if (all.size() > size_t(opt.top_k)) all.resize(opt.top_k);
  return all;
}

}  // namespace baton::plan
