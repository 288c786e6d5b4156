// PTD-P layout search (issue 7): the closed forms agree with the pipeline simulator, predictions
// behave as the papers say, the paper check on PTD-P Table 1 (--evaluate of the paper's layouts, and
// the search within the paper's space), the search's options (schedule kinds read from the
// registry's traits, recompute modes, errors), and the search speed requirement.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <random>

#include "config/config.h"
#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/simulate.h"
#include "plan/ptdp.h"

namespace baton::plan {
namespace {

const std::string kSrc = BATON_SOURCE_DIR;

pipeline::Program program(const std::string& kind, int pp, int vp, int m) {
  pipeline::ScheduleSpec s;
  s.kind = kind;
  s.pp = pp;
  s.vp = vp;
  s.microbatches = m;
  return pipeline::lower(pipeline::generate(s));
}

// peak_stashes is the closed form of pipeline::memory_peaks for every kind the search costs.
TEST(PlanPtdp, PeakStashesMatchSchedules) {
  for (const std::string& k : costed_schedules())
    for (int pp = 1; pp <= 6; ++pp)
      for (int vp : {1, 2, 3})
        for (int m = 1; m <= 13; ++m) {
          const auto& t = pipeline::schedule_traits(k);
          if (t.interleaving ? (vp == 1 || pp == 1 || m % pp) : vp > 1) continue;
          if (t.min_microbatches_pp && m < pp) continue;
          const auto peaks = pipeline::memory_peaks(program(k, pp, vp, m));
          for (int r = 0; r < pp; ++r)
            EXPECT_EQ(peak_stashes(k, pp, vp, m, r), peaks.activations[r])
                << k << " pp " << pp << " vp " << vp << " m " << m << " rank " << r;
        }
}

// The closed-form makespan equals the simulator's for uniform stages ((p − 1)/m and (p − 1)/(v·m)
// bubbles, plus the transfer terms) and stays within 6% when the first and last stages are up to
// 20% heavier (embedding, LM head) — the regime the search uses it in.
TEST(PlanPtdp, ClosedFormAgreesWithSimulator) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(1.0, 1.2), uc(0.0, 0.1);
  for (const std::string& k : synchronous_schedules())
    for (int pp : {1, 2, 4, 8})
      for (int vp : {1, 2, 4})
        for (int m : {8, 16, 32}) {
          if (pipeline::schedule_traits(k).interleaving != (vp > 1) || (vp > 1 && pp == 1)) continue;
          const auto prog = program(k, pp, vp, m);
          const int S = pp * vp;
          for (int trial = 0; trial < 3; ++trial) {
            pipeline::Costs c;
            std::vector<double> fb;
            const double hop = trial == 0 ? 0 : uc(rng);
            for (int s = 0; s < S; ++s) {
              const bool end = s == 0 || s == S - 1;
              const double f = (trial == 2 && end ? u(rng) : 1.0) / vp;
              c.stage.push_back({f, 2 * f, 0});
              fb.push_back(3 * f);
            }
            c.send_act.assign(S, hop);
            c.send_grad.assign(S, hop);
            const double sim = pipeline::simulate(prog, c).makespan;
            const double cf = closed_form_makespan(k, pp, vp, m, fb, hop);
            if (trial < 2)
              EXPECT_NEAR(cf, sim, 1e-9 * sim) << k << " pp " << pp << " vp " << vp << " m " << m;
            else
              EXPECT_NEAR(cf, sim, 0.06 * sim) << k << " pp " << pp << " vp " << vp << " m " << m;
          }
        }
}

PtdpProblem problem_from(const std::string& config, int gpus) {
  const Config cfg = load_config(kSrc + "/" + config, {}, gpus);
  PtdpProblem pb;
  pb.shape = {cfg.model.n_layer, cfg.model.n_head, cfg.model.d_model, cfg.model.seq_len,
              cfg.model.vocab_size};
  pb.global_batch = cfg.train.global_batch;
  pb.cluster = load_cluster(kSrc + "/configs/clusters/selene.toml").first_gpus(gpus);
  return pb;
}

Layout layout_of(const Config& c) {
  return {c.parallel.tp,       c.parallel.pp,        c.dp,
          c.parallel.vp,       c.train.micro_batch,  c.parallel.schedule,
          c.parallel.recompute, c.parallel.sequence_parallel, c.parallel.scatter_gather,
          c.parallel.zero1};
}

// PTD-P Table 1 (shared/papers/README.md; configs/ptdp/): the published TFLOP/s per GPU (Eq. 4.2
// count: full recomputation), and whether the search within the paper's space agrees with the
// paper's layout, as docs/planner.md's "Paper check" claims (the tables there are
// launch/plan-paper-table.sh's output).
struct Table1Row {
  const char* name;
  int gpus;
  double published;
  bool search_agrees;
};
const Table1Row kTable1[] = {
    {"1.7b", 32, 137, true},       {"3.6b", 64, 138, false},     {"7.5b", 128, 142, false},
    {"18.4b", 256, 135, false},    {"39.1b", 512, 138, false},   {"76.1b", 1024, 140, true},
    {"145.6b", 1536, 148, false},  {"310.1b", 1920, 155, true},  {"529.6b", 2520, 163, true},
    {"1008b", 3072, 163, true}};

std::string table1_config(const Table1Row& r) { return std::string("configs/ptdp/gpt-") + r.name + ".toml"; }

// The paper's layout of a row (the config's: the paper's tp × pp; vp and micro-batch 1 are our
// assumptions, docs/planner.md), predicted.
Prediction paper_layout(const Table1Row& r) {
  const Config cfg = load_config(kSrc + "/" + table1_config(r), {}, r.gpus);
  return evaluate(problem_from(table1_config(r), r.gpus), layout_of(cfg), true);
}

// Paper check: the ten A100 configurations predicted from one set of assumptions each land within
// ±7% of the published TFLOP/s per GPU (what docs/planner.md claims; measured: −6.9% … +5.3%).
TEST(PlanPtdp, PaperCheckTable1) {
  for (const Table1Row& r : kTable1) {
    const Prediction p = paper_layout(r);
    EXPECT_TRUE(p.fits) << r.name;
    const double err = p.hw_tflops_per_gpu / r.published - 1;
    EXPECT_LE(std::abs(err), 0.07) << r.name << ": predicted " << p.hw_tflops_per_gpu
                                   << " TFLOP/s, published " << r.published;
    std::printf("%-7s %5d GPUs  published %5.0f  predicted %6.1f  (%+.1f%%)\n", r.name, r.gpus,
                r.published, p.hw_tflops_per_gpu, 100 * err);
  }
}

// The search within the paper's space — PTD-P's schedules (1f1b, interleaved; synchronous), full
// recomputation only (the paper's, 2021), micro-batch free (Table 1 does not fix it) — against the
// paper's layout. A row agrees when the search picks the paper's tp × pp, or predicts the paper's
// layout within 3% of its pick. The test holds each row to what docs/planner.md claims: a cost-model
// change that flips a row, either way, fails here until the docs say so. The rows that disagree
// are a disagreement of the model with the paper's heuristic choice (tensor parallelism up to a
// node first, §4.3 takeaway #1), not a tolerance question: docs/planner.md. The paper's layout is
// in the space, so the pick is never predicted slower than it.
TEST(PlanPtdp, PaperSpaceSearchTable1) {
  SearchOptions so;
  so.top_k = 1;
  so.schedules = {"1f1b", "interleaved"};
  so.recompute = {"full"};
  for (const Table1Row& r : kTable1) {
    const auto best = search(problem_from(table1_config(r), r.gpus), so);
    ASSERT_EQ(best.size(), 1u) << r.name;
    const Prediction& pick = best[0];
    const Prediction paper = paper_layout(r);
    EXPECT_TRUE(pipeline::schedule_traits(pick.layout.schedule).synchronous()) << r.name;
    EXPECT_EQ(pick.layout.recompute, "full") << r.name;
    const double gap = paper.step_time_s / pick.step_time_s - 1;
    EXPECT_GE(gap, 0.0) << r.name << ": the search missed the paper's layout";
    const bool same = pick.layout.tp == paper.layout.tp && pick.layout.pp == paper.layout.pp;
    const bool agrees = same || gap <= 0.03;
    EXPECT_EQ(agrees, r.search_agrees)
        << r.name << ": search picks tp " << pick.layout.tp << " x pp " << pick.layout.pp << " vp "
        << pick.layout.vp << " mb " << pick.layout.micro_batch << ", the paper's tp "
        << paper.layout.tp << " x pp " << paper.layout.pp << " is predicted " << 100 * gap
        << "% slower; docs/planner.md says it " << (r.search_agrees ? "agrees" : "does not");
    std::printf("%-7s paper %d x %d  pick %d x %d vp %d mb %d  paper's layout %+.1f%%  %s\n", r.name,
                paper.layout.tp, paper.layout.pp, pick.layout.tp, pick.layout.pp, pick.layout.vp,
                pick.layout.micro_batch, 100 * gap, agrees ? "agrees" : "disagrees");
  }
}

// The simulator and the closed form give the same prediction for a PTD-P layout (stages differ
// only by the embedding and the head).
TEST(PlanPtdp, EvaluateSimulatorMatchesClosedForm) {
  const std::string path = "configs/ptdp/gpt-145.6b.toml";
  const Config cfg = load_config(kSrc + "/" + path, {}, 1536);
  const auto pb = problem_from(path, 1536);
  const Prediction sim = evaluate(pb, layout_of(cfg), true), cf = evaluate(pb, layout_of(cfg), false);
  EXPECT_TRUE(sim.simulated);
  EXPECT_FALSE(cf.simulated);
  EXPECT_NEAR(sim.step_time_s, cf.step_time_s, 0.02 * sim.step_time_s);
}

// PTD-P's qualitative takeaways (notes-dissertation §2.3–2.4) hold in the model: interleaving
// shrinks the bubble; recomputation costs compute but saves memory; bubble (p − 1)/m.
TEST(PlanPtdp, PredictionsBehaveAsThePapersSay) {
  const std::string path = "configs/ptdp/gpt-145.6b.toml";
  const auto pb = problem_from(path, 1536);
  Layout l{8, 8, 24, 1, 1, "1f1b", "full", false, true, false};
  const Prediction flat = evaluate(pb, l, true);
  l.schedule = "interleaved";
  l.vp = 2;
  const Prediction inter = evaluate(pb, l, true);
  EXPECT_LT(inter.bubble_fraction, flat.bubble_fraction);
  EXPECT_NEAR(flat.bubble_fraction, 7.0 / 96, 0.02);  // (p − 1)/m with m = 2304/24 = 96
  l.schedule = "1f1b";
  l.vp = 1;
  l.recompute = "none";
  const Prediction norc = evaluate(pb, l, true);
  EXPECT_LT(norc.step_time_s, flat.step_time_s);
  EXPECT_GT(norc.memory_gb[0], flat.memory_gb[0]);
  EXPECT_FALSE(norc.fits);  // 145B without recomputation does not fit in 80 GB at pp = 8
  // Memory decreases along the 1F1B pipeline (stage s keeps p − s micro-batches).
  EXPECT_GT(flat.memory_gb[0], flat.memory_gb[4]);
  l.tp = 3;
  EXPECT_THROW(evaluate(pb, l, true), Error);
}

bool contains(const std::vector<std::string>& v, std::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// What an Error says (what and hint), for matching.
std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_FALSE(e.hint().empty()) << e.what();
    return std::string(e.what()) + " | " + e.hint();
  }
  ADD_FAILURE() << "no Error thrown";
  return "";
}

// The search's schedule kinds come from the registry: the default is exactly the costed kinds the
// registry calls synchronous; a registered kind the planner cannot cost, an unknown kind or
// recompute mode, or an empty list is an error with a hint.
TEST(PlanPtdp, SearchOptionsFromTheRegistry) {
  const auto costed = costed_schedules(), sync = synchronous_schedules();
  ASSERT_FALSE(sync.empty());
  for (const auto& t : pipeline::schedule_registry()) {
    EXPECT_EQ(contains(sync, t.name), contains(costed, t.name) && t.synchronous()) << t.name;
    if (!contains(costed, t.name)) {
      EXPECT_NE(error_text([&] { parse_schedule_list(std::string(t.name)); }).find("no cost model"),
                std::string::npos)
          << t.name;
    }
  }
  EXPECT_EQ(SearchOptions{}.schedules, sync);
  EXPECT_EQ(SearchOptions{}.recompute, recompute_modes());
  EXPECT_TRUE(contains(costed, "2bw"));  // asynchronous: searched only when named
  EXPECT_EQ(parse_schedule_list(" 1f1b,interleaved ,1f1b"), (std::vector<std::string>{"1f1b", "interleaved"}));
  EXPECT_EQ(parse_schedule_list("all"), costed);
  EXPECT_EQ(parse_recompute_list("full,none"), (std::vector<std::string>{"full", "none"}));
  EXPECT_NE(error_text([] { parse_schedule_list("1f1b,nope"); }).find("unknown schedule kind 'nope'"),
            std::string::npos);
  EXPECT_NE(error_text([] { parse_schedule_list(","); }).find("no schedule kinds"), std::string::npos);
  EXPECT_NE(error_text([] { parse_recompute_list("full,some"); }).find("unknown recompute mode 'some'"),
            std::string::npos);
  EXPECT_NE(error_text([] { parse_recompute_list(""); }).find("no recompute modes"), std::string::npos);
}

// The search stays within its options: by default only synchronous kinds; a named asynchronous
// kind only where it can run (pp >= 2); one recompute mode only that mode. The unrestricted space
// is a superset, so its best is never predicted slower.
TEST(PlanPtdp, SearchStaysInItsSpace) {
  const auto pb = problem_from("configs/ptdp/gpt-39.1b.toml", 512);
  SearchOptions so;
  so.top_k = 30;
  const auto sync = search(pb, so);
  ASSERT_FALSE(sync.empty());
  for (const auto& p : sync) EXPECT_TRUE(pipeline::schedule_traits(p.layout.schedule).synchronous());
  so.schedules = {"2bw"};
  so.recompute = {"selective"};
  const auto async = search(pb, so);
  ASSERT_FALSE(async.empty());
  for (const auto& p : async) {
    EXPECT_EQ(p.layout.schedule, "2bw");
    EXPECT_GE(p.layout.pp, 2);
    EXPECT_EQ(p.layout.recompute, "selective");
  }
  so.schedules = parse_schedule_list("all");
  so.recompute = recompute_modes();
  EXPECT_LE(search(pb, so)[0].step_time_s, sync[0].step_time_s);
  so.schedules = {"zb-h1"};
  EXPECT_THROW(search(pb, so), Error);
}

// Speed requirement: a 128-layer GPT on 3072 GPUs plans in under 10 s; the best layout fits and
// is no slower than any other evaluated candidate.
TEST(PlanPtdp, SearchSpeedAndOptimality) {
  const auto pb = problem_from("configs/ptdp/gpt-1008b.toml", 3072);
  const auto t0 = std::chrono::steady_clock::now();
  SearchOptions so;
  so.top_k = 5;
  const auto best = search(pb, so);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 10.0);
  ASSERT_FALSE(best.empty());
  for (size_t i = 1; i < best.size(); ++i) EXPECT_LE(best[0].step_time_s, best[i].step_time_s);
  for (const auto& p : best) EXPECT_TRUE(p.fits);
  // The paper's own layout for this model is among the candidates and not faster than the best.
  const Prediction paper = evaluate(pb, {8, 64, 6, 2, 1, "interleaved", "full", false, true, false});
  EXPECT_LE(best[0].step_time_s, paper.step_time_s * 1.0001);
  EXPECT_LE(best[0].layout.tp * best[0].layout.pp * best[0].layout.dp, 3072);
}

}  // namespace
}  // namespace baton::plan
