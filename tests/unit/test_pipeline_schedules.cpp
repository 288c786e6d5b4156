// Pipeline schedules as data: generator invariant sweeps through validate, hand-derived golden text
// files, text-form round trips, the weight-version rules of pipedream / vertical sync / 2bw /
// 1F1B-RR, validate catching broken programs, and the spec errors.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/simulate.h"
#include "pipeline/text.h"
#include "pipeline/validate.h"

namespace baton::pipeline {
namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// Every spec the sweep visits that check_spec accepts.
std::vector<ScheduleSpec> sweep_specs() {
  std::vector<ScheduleSpec> out;
  for (const std::string& kind : schedule_kinds()) {
    const ScheduleTraits& t = schedule_traits(kind);
    if (!t.generated) continue;  // wsp: planned
    for (int pp = 1; pp <= 8; ++pp)
      for (int vp = 1; vp <= (t.interleaving ? 4 : 1); ++vp)
        for (int m = 1; m <= 32; ++m) {
          ScheduleSpec s{.kind = kind, .pp = pp, .vp = vp, .microbatches = m};
          if (t.interleaving && m % pp != 0) continue;
          if (t.min_microbatches_pp && m < pp) continue;
          out.push_back(s);
        }
  }
  return out;
}

TEST(PipelineSchedules, RegistryListsTheKinds) {
  EXPECT_EQ(schedule_kinds(),
            (std::vector<std::string>{"gpipe", "1f1b", "interleaved", "pipedream", "2bw", "zb-h1",
                                      "1f1b-star", "hetpipe", "wsp"}));
}

// The traits are what lower, validate, the executor, config validation and the trainer read
// instead of kind names (issue 11): each kind's update rule and options as the papers define them.
TEST(PipelineSchedules, TraitsDescribeEachKind) {
  using U = UpdateRule;
  for (const char* k : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
    EXPECT_EQ(schedule_traits(k).update, U::FLUSH) << k;
    EXPECT_EQ(schedule_traits(k).weight_versions, 1) << k;
    EXPECT_TRUE(schedule_traits(k).executable) << k;
  }
  EXPECT_TRUE(schedule_traits("interleaved").interleaving);
  EXPECT_TRUE(schedule_traits("zb-h1").split_backward);
  EXPECT_EQ(schedule_traits("2bw").update, U::PER_BATCH);
  EXPECT_EQ(schedule_traits("2bw").weight_versions, 2);
  EXPECT_EQ(schedule_traits("1f1b-star").update, U::PER_BATCH);
  EXPECT_FALSE(schedule_traits("1f1b-star").executable);
  EXPECT_EQ(schedule_traits("pipedream").update, U::PER_MICROBATCH);
  EXPECT_TRUE(schedule_traits("pipedream").replicas && schedule_traits("pipedream").vertical_sync);
  EXPECT_EQ(schedule_traits("wsp").update, U::PER_WAVE);
  EXPECT_FALSE(schedule_traits("wsp").generated || schedule_traits("wsp").executable);
  for (const ScheduleTraits& t : schedule_registry()) {
    EXPECT_FALSE(t.summary.empty()) << t.name;
    EXPECT_EQ(&schedule_traits(t.name), &schedule_traits(std::string(t.name)));
    // Only the generated kinds' programs carry their traits through generate and lower.
    if (!t.generated) continue;
    const Program p = lower(generate({.kind = std::string(t.name), .pp = 2, .microbatches = 4}));
    EXPECT_EQ(p.traits().name, t.name);
  }
  EXPECT_THROW(schedule_traits("zigzag"), Error);
}

// HetPipe §4 inside a virtual worker: minibatch k (0-based) reads version max(k − Nm + 1, 0) on
// every stage, each stage's forward of k comes after its own backward of k − Nm (at most Nm in
// flight on the first stage: "minibatch p starts once p − Nm finished"), forwards and backwards
// run in minibatch order, and the last stage runs F and B of a minibatch back to back. With
// Nm = pp the program is pipedream's with vertical sync.
TEST(PipelineSchedules, HetpipeKeepsNmInFlightAndReadsLocalUpdatesUpToPMinusNm) {
  EXPECT_EQ(schedule_traits("hetpipe").update, UpdateRule::PER_MICROBATCH);
  EXPECT_TRUE(schedule_traits("hetpipe").in_flight_nm && schedule_traits("hetpipe").executable);
  for (int pp = 1; pp <= 4; ++pp)
    for (int nm = 1; nm <= 6; ++nm) {
      const int n = 12;
      const Program p = generate({.kind = "hetpipe", .pp = pp, .microbatches = n, .nm = nm});
      SCOPED_TRACE(fmt::format("pp {} nm {}", pp, nm));
      ASSERT_EQ(joined(validate(lower(p))), "");
      for (int s = 0; s < pp; ++s) {
        std::vector<int> fwd_order, bwd_order;
        int in_flight = 0, peak = 0;
        std::set<int> done;  // backwards finished on this stage
        for (const Instr& in : p.ranks[s]) {
          if (in.op == Op::FWD) {
            EXPECT_EQ(in.weight_version, std::max(in.microbatch - nm + 1, 0));
            EXPECT_TRUE(in.microbatch < nm || done.count(in.microbatch - nm)) << "F" << in.microbatch;
            fwd_order.push_back(in.microbatch);
            peak = std::max(peak, ++in_flight);
          } else {
            bwd_order.push_back(in.microbatch);
            done.insert(in.microbatch);
            --in_flight;
          }
        }
        EXPECT_TRUE(std::is_sorted(fwd_order.begin(), fwd_order.end()));
        EXPECT_TRUE(std::is_sorted(bwd_order.begin(), bwd_order.end()));
        EXPECT_EQ(peak, s == pp - 1 ? 1 : std::max(1, std::min(nm - s, n)));
      }
      if (nm == pp) {
        Program pd = generate({.kind = "pipedream", .pp = pp, .microbatches = n, .vertical_sync = true});
        EXPECT_EQ(pd.ranks, p.ranks);
      }
    }
  EXPECT_THROW(generate({.kind = "pipedream", .pp = 2, .microbatches = 4, .nm = 2}), Error);
  const Program text = generate({.kind = "hetpipe", .pp = 2, .microbatches = 4, .nm = 3});
  EXPECT_EQ(parse_program(to_text(text)), text);
}

// What Executor::retarget relies on when a WSP stop cuts a virtual worker's hetpipe program at
// minibatch n (train/hetero/wsp_stage.h "Stopping"): on every rank the lowered program of n minibatches
// is the lowered program of more minibatches up to and including its forward of minibatch n − 1
// (0-based; the point where each rank learns of the cut), so what ran stays valid.
TEST(PipelineSchedules, HetpipeProgramsCutAfterAForwardArePrefixes) {
  for (int pp = 1; pp <= 4; ++pp)
    for (int nm = 1; nm <= 5; ++nm) {
      const Program whole = lower(generate({.kind = "hetpipe", .pp = pp, .microbatches = 1, .steps = 16, .nm = nm}));
      for (int n = 1; n < 16; ++n) {
        SCOPED_TRACE(fmt::format("pp {} nm {}: cut at {}", pp, nm, n));
        const Program cut = lower(generate({.kind = "hetpipe", .pp = pp, .microbatches = 1, .steps = n, .nm = nm}));
        ASSERT_EQ(joined(validate(cut)), "");
        for (int r = 0; r < pp; ++r) {
          const std::vector<Instr>& a = cut.ranks[r];
          const auto last_fwd = std::find_if(a.rbegin(), a.rend(), [&](const Instr& in) {
            return in.op == Op::FWD && in.microbatch == n - 1;
          });
          ASSERT_NE(last_fwd, a.rend()) << "rank " << r;
          const size_t upto = static_cast<size_t>(a.rend() - last_fwd);  // through that forward
          ASSERT_LE(upto, whole.ranks[r].size());
          for (size_t i = 0; i < upto; ++i) ASSERT_EQ(a[i], whole.ranks[r][i]) << "rank " << r << " instruction " << i;
        }
      }
    }
}

TEST(PipelineSchedules, SweepValidatesBeforeAndAfterLowering) {
  int programs = 0;
  for (const ScheduleSpec& spec : sweep_specs()) {
    SCOPED_TRACE(to_text(Program{.spec = spec}).substr(0, 80));
    const Program p = generate(spec);
    ASSERT_EQ(static_cast<int>(p.ranks.size()), spec.pp);
    // Exactly one forward and one backward (or I + W) per (stage, microbatch): count ops.
    size_t ops = 0;
    for (const auto& r : p.ranks) ops += r.size();
    const size_t per_mb = spec.kind == "zb-h1" ? 3 : 2;
    EXPECT_EQ(ops, per_mb * spec.pp * spec.vp * spec.microbatches);
    ASSERT_EQ(joined(validate(p)), "");
    const Program l = lower(p);
    ASSERT_EQ(joined(validate(l)), "");
    ++programs;
  }
  EXPECT_GT(programs, 6 * 8 * 16);
}

TEST(PipelineSchedules, SweepWithSeveralStepsAndVerticalSync) {
  for (const std::string kind : {"gpipe", "1f1b", "interleaved", "pipedream", "2bw", "zb-h1"})
    for (int pp = 1; pp <= 5; ++pp)
      for (int m : {pp, 2 * pp, pp + 1})
        for (int steps : {2, 3}) {
          ScheduleSpec s{.kind = kind, .pp = pp, .vp = kind == "interleaved" ? 2 : 1,
                         .microbatches = kind == "interleaved" ? 2 * pp : m, .steps = steps};
          SCOPED_TRACE(kind + " pp " + std::to_string(pp) + " m " + std::to_string(m));
          ASSERT_EQ(joined(validate(lower(generate(s)))), "");
          if (kind == "pipedream") {
            s.vertical_sync = true;
            ASSERT_EQ(joined(validate(lower(generate(s)))), "");
          }
        }
}

TEST(PipelineSchedules, ReplicatedStagesValidate) {
  for (const std::vector<int>& reps :
       std::vector<std::vector<int>>{{2, 1}, {1, 2}, {2, 2}, {3, 1, 1}, {1, 3, 2}, {2, 1, 2, 1}})
    for (int m : {6, 12, 24}) {
      ScheduleSpec s{.kind = "pipedream", .pp = static_cast<int>(reps.size()), .microbatches = m,
                     .replicas = reps};
      const Program p = generate(s);
      int workers = 0;
      for (int r : reps) workers += r;
      ASSERT_EQ(static_cast<int>(p.ranks.size()), workers);
      ASSERT_EQ(joined(validate(p)), "");
      ASSERT_EQ(joined(validate(lower(p))), "");
    }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The golden files are hand-derived (each explains its derivation in its comments). The program
// the generator builds for the golden's header must print exactly as the golden's non-comment lines.
// Lowering emits exactly what runs (issue 11): one update per rank covering all its stages
// (interleaving: both chunks), REDUCE_TIED before it on the ranks holding the tied first and last
// stage, LOAD before every forward of the first and the last stage. The simulator treats the tied
// reductions as one collective of those ranks, and validation refuses a rank that skips its own.
TEST(PipelineLower, UpdatesPerRankTiedReductionsAndLoads) {
  const Program p = lower(generate({.kind = "interleaved", .pp = 2, .vp = 2, .microbatches = 2}),
                          {.tied_stages = {0, 3}});
  ASSERT_EQ(joined(validate(p)), "");
  auto tail = [&](int r) {
    const auto& l = p.ranks[r];
    return to_text(l[l.size() - 3]) + " " + to_text(l[l.size() - 2]) + " " + to_text(l.back());
  };
  EXPECT_EQ(tail(0), "0REDUCE_TIED 0REDUCE_GRADS 0OPT_STEPv1");  // stages 0 and 2
  EXPECT_EQ(tail(1), "3REDUCE_TIED 1REDUCE_GRADS 1OPT_STEPv1");  // stages 1 and 3
  for (const auto& rank : p.ranks) {
    int loads = 0, updates = 0;
    for (size_t i = 0; i < rank.size(); ++i) {
      loads += rank[i].op == Op::LOAD;
      updates += rank[i].op == Op::OPT_STEP;
      if (rank[i].op == Op::LOAD) {
        EXPECT_EQ(rank[i + 1].op, Op::FWD);
      }
    }
    EXPECT_EQ(loads, 2);  // stage 0 (rank 0) and stage 3 (rank 1), two microbatches each
    EXPECT_EQ(updates, 1);
  }
  EXPECT_NO_THROW(simulate(p, Costs::uniform(p, 1, 1)));
  Program q = p;
  q.ranks[1].erase(q.ranks[1].end() - 3);  // rank 1 skips its tied reduction
  EXPECT_NE(joined(validate(q)).find("reduces tied gradients"), std::string::npos) << joined(validate(q));
  EXPECT_THROW(simulate(q, Costs::uniform(q, 1, 1)), Error);  // rank 0 waits for it forever
  // A one-stage program (pp = 1: what the trainer runs without pipelining) holds every piece.
  const Program one = lower(generate({.kind = "1f1b", .pp = 1, .microbatches = 3}));
  EXPECT_EQ(to_text(one).substr(to_text(one).find("rank 0:")),
            "rank 0: 0LOAD0s0 0F0s0 0B0s0 0LOAD1s0 0F1s0 0B1s0 0LOAD2s0 0F2s0 0B2s0 0REDUCE_GRADS "
            "0OPT_STEPv1\n");
}

TEST(PipelineSchedules, GoldenTextFiles) {
  const std::string dir = std::string(BATON_SOURCE_DIR) + "/tests/unit/golden/pipeline/";
  for (const std::string name :
       {"1f1b_pp4_m8", "gpipe_pp2_m3", "interleaved_pp2_vp2_m4", "zb-h1_pp3_m4", "pipedream_pp3_m4",
        "pipedream_vsync_pp3_m4", "pipedream_rr_2-1_m4", "2bw_pp2_m2_steps3_lowered"}) {
    SCOPED_TRACE(name);
    const std::string text = read_file(dir + name + ".txt");
    const Program golden = parse_program(text);
    Program built = generate(golden.spec);
    if (golden.lowered) built = lower(built);
    std::string body;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);)
      if (!line.empty() && line[0] != '#') body += line + "\n";
    EXPECT_EQ(to_text(built), body);
    EXPECT_EQ(built, golden);
    EXPECT_EQ(joined(validate(golden)), "");
  }
}

TEST(PipelineText, RoundTripsEverySweptProgram) {
  for (const ScheduleSpec& spec : sweep_specs()) {
    if (spec.microbatches % 5 != 1) continue;  // a slice keeps the test fast
    const Program p = generate(spec);
    EXPECT_EQ(parse_program(to_text(p)), p);
    const Program l = lower(p);
    EXPECT_EQ(parse_program(to_text(l)), l);
  }
  ScheduleSpec rr{.kind = "pipedream", .pp = 2, .microbatches = 4, .replicas = {2, 1}};
  EXPECT_EQ(parse_program(to_text(lower(generate(rr)))), lower(generate(rr)));
  ScheduleSpec vs{.kind = "pipedream", .pp = 3, .microbatches = 5, .vertical_sync = true};
  EXPECT_EQ(parse_program(to_text(generate(vs))), generate(vs));
}

TEST(PipelineText, InstructionGrammar) {
  EXPECT_EQ(parse_instr("0F3"), (Instr{.op = Op::FWD, .stage = 0, .microbatch = 3}));
  EXPECT_EQ(parse_instr("1SEND_ACT3s0p2"),
            (Instr{.op = Op::SEND_ACT, .stage = 1, .microbatch = 3, .slot = 0, .peer = 2}));
  EXPECT_EQ(parse_instr("12W7s3v4"), (Instr{.op = Op::BWD_WEIGHT, .stage = 12, .microbatch = 7,
                                           .slot = 3, .weight_version = 4}));
  EXPECT_EQ(parse_instr("0OPT_STEPv1"), (Instr{.op = Op::OPT_STEP, .weight_version = 1}));
  EXPECT_EQ(to_text(Instr{.op = Op::RECV_GRAD, .stage = 2, .microbatch = 5, .slot = 1, .peer = 3}),
            "2RECV_GRAD5s1p3");
  for (const char* bad : {"", "F3", "0X3", "0F3x", "0F3p1s2", "0Fs", "0F99999999999", "-1F0"})
    EXPECT_THROW(parse_instr(bad), Error) << bad;
  EXPECT_THROW(parse_program("rank 0: 0F0s0\n"), Error);                         // no header
  EXPECT_THROW(parse_program("program kind=1f1b pp=x\n"), Error);               // bad number
  EXPECT_THROW(parse_program("program kind=1f1b pp=1\nrank 1: 0F0s0\n"), Error);  // rank order
}

// PipeDream's stashing (notes-dissertation §1.3): stage s (0-based) of a straight p-stage pipeline
// reads W_s(k − p + s + 1) for microbatch k, i.e. W_i(t − p + i) with 1-based i; with vertical sync
// every stage reads W(k − p + 1). Backward reads what its forward read.
TEST(PipelineSchedules, PipedreamWeightVersionsFollowThePaper) {
  for (bool vsync : {false, true})
    for (int p = 1; p <= 6; ++p) {
      const Program prog = generate(
          {.kind = "pipedream", .pp = p, .microbatches = 3 * p + 1, .vertical_sync = vsync});
      for (int s = 0; s < p; ++s)
        for (const Instr& in : prog.ranks[s]) {
          const int want = std::max(0, in.microbatch - p + (vsync ? 0 : s) + 1);
          EXPECT_EQ(in.weight_version, want)
              << "p " << p << " stage " << s << " mb " << in.microbatch << " vsync " << vsync;
        }
    }
}

// 2BW (notes-dissertation §1.4): p = m = 4 example — W(0) is last used by input 8 (1-based) and
// version 1 ("W^(4)") first used by input 9's forward; in general max(⌊k/m⌋ − 1, 0) for 0-based k.
TEST(PipelineSchedules, TwoBwVersionsFollowThePaper) {
  const Program prog = generate({.kind = "2bw", .pp = 4, .microbatches = 4, .steps = 4});
  for (const auto& rank : prog.ranks)
    for (const Instr& in : rank) {
      EXPECT_EQ(in.weight_version, std::max(in.microbatch / 4 - 1, 0));
      if (in.microbatch == 7) {
        EXPECT_EQ(in.weight_version, 0);  // input 8
      }
      if (in.microbatch == 8) {
        EXPECT_EQ(in.weight_version, 1);  // input 9
      }
    }
}

// 1F1B-RR (notes-pipedream §1): microbatch k of stage s runs on replica k mod r_s, and the input
// stage admits NOAM = ⌈workers / r_0⌉ microbatches per replica before its first backward.
TEST(PipelineSchedules, RoundRobinReplicasAndNoam) {
  const Program p = generate({.kind = "pipedream", .pp = 3, .microbatches = 12, .replicas = {2, 1, 1}});
  ASSERT_EQ(p.ranks.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    int forwards_before_backward = 0;
    for (const Instr& in : p.ranks[r]) {
      EXPECT_EQ(p.rank_of(in.stage, in.microbatch), r);
      if (r < 2) {
        EXPECT_EQ(in.microbatch % 2, r);  // even ids on rank 0, odd on rank 1
      }
      if (in.op != Op::FWD) break;
      ++forwards_before_backward;
    }
    const int want[] = {2, 2, 2, 1};  // ⌈4/2⌉, ⌈4/2⌉, ⌈2/1⌉, ⌈1/1⌉
    EXPECT_EQ(forwards_before_backward, want[r]) << "rank " << r;
  }
  // Unreplicated 4-stage pipeline: NOAM = 4 (the paper's example).
  const Program straight = generate({.kind = "pipedream", .pp = 4, .microbatches = 8});
  int admitted = 0;
  for (const Instr& in : straight.ranks[0]) {
    if (in.op != Op::FWD) break;
    ++admitted;
  }
  EXPECT_EQ(admitted, 4);
}

// validate must catch each kind of broken program.
std::string problems_of(const Program& p) { return joined(validate(p)); }

TEST(PipelineValidate, CatchesBrokenPrograms) {
  const Program good = lower(generate({.kind = "1f1b", .pp = 3, .microbatches = 4}));
  ASSERT_EQ(problems_of(good), "");
  auto find = [](Program& p, int r, const std::string& tok) -> std::vector<Instr>::iterator {
    auto& v = p.ranks[r];
    for (auto it = v.begin(); it != v.end(); ++it)
      if (to_text(*it) == tok) return it;
    ADD_FAILURE() << "no " << tok << " on rank " << r;
    return v.end();
  };
  {  // backward before forward
    Program p = generate({.kind = "gpipe", .pp = 1, .microbatches = 2});
    std::swap(p.ranks[0][0], p.ranks[0][2]);  // 0B0 first
    EXPECT_NE(problems_of(p).find("backward before its forward"), std::string::npos) << problems_of(p);
  }
  {  // a slot overwritten while live
    Program p = generate({.kind = "gpipe", .pp = 1, .microbatches = 2});
    p.ranks[0][1].slot = 0;  // 0F1 into slot 0, which holds microbatch 0
    EXPECT_NE(problems_of(p).find("overwrites slot 0"), std::string::npos) << problems_of(p);
  }
  {  // a receive removed: the send is unmatched and the forward has no input
    Program p = good;
    p.ranks[1].erase(find(p, 1, "1RECV_ACT2s0p0"));
    const std::string why = problems_of(p);
    EXPECT_NE(why.find("FWD before its RECV_ACT"), std::string::npos) << why;
    EXPECT_NE(why.find("never received"), std::string::npos) << why;
  }
  {  // wrong peer
    Program p = good;
    find(p, 0, "0SEND_ACT1s1p1")->peer = 2;
    EXPECT_NE(problems_of(p).find("peer must be rank 1"), std::string::npos) << problems_of(p);
  }
  {  // optimizer step inside the flush
    Program p = good;
    auto& r2 = p.ranks[2];
    std::rotate(r2.begin() + 3, r2.end() - 2, r2.end());  // move REDUCE_GRADS, OPT_STEP early
    EXPECT_NE(problems_of(p).find("in flight"), std::string::npos) << problems_of(p);
  }
  {  // split backward out of order
    Program p = generate({.kind = "zb-h1", .pp = 1, .microbatches = 1});
    std::swap(p.ranks[0][1], p.ranks[0][2]);  // W before I
    EXPECT_NE(problems_of(p).find("after BWD_INPUT"), std::string::npos) << problems_of(p);
  }
  {  // stashing broken: backward reads another version than its forward
    Program p = lower(generate({.kind = "pipedream", .pp = 2, .microbatches = 4}));
    find(p, 0, "0B2s0v1")->weight_version = 2;
    EXPECT_NE(problems_of(p).find("weight stashing"), std::string::npos) << problems_of(p);
  }
  {  // pipedream forward reading a stale version
    Program p = lower(generate({.kind = "pipedream", .pp = 2, .microbatches = 4}));
    auto f = find(p, 0, "0F3s1v2");
    f->weight_version = 1;
    find(p, 0, "0B3s1v2")->weight_version = 1;
    EXPECT_NE(problems_of(p).find("latest version 2"), std::string::npos) << problems_of(p);
  }
  {  // 2bw: a version other than the rule's, and a third live version
    Program p = lower(generate({.kind = "2bw", .pp = 2, .microbatches = 2, .steps = 3}));
    find(p, 0, "0F4s0v1")->weight_version = 0;
    find(p, 0, "0B4s0v1")->weight_version = 0;
    const std::string why = problems_of(p);
    EXPECT_NE(why.find("must read version"), std::string::npos) << why;
    EXPECT_NE(why.find("at most two weight versions"), std::string::npos) << why;
  }
  {  // a microbatch on the wrong rank, and a missing microbatch
    Program p = generate({.kind = "1f1b", .pp = 2, .microbatches = 2});
    p.ranks[1].clear();
    EXPECT_NE(problems_of(p).find("stage 1 microbatch 0: forward or backward missing"),
              std::string::npos);
    p.ranks[1].push_back(Instr{.op = Op::FWD, .stage = 0, .microbatch = 0, .slot = 0});
    EXPECT_NE(problems_of(p).find("belongs to rank 0"), std::string::npos);
  }
  EXPECT_THROW(check_valid(Program{.spec = {.kind = "1f1b", .pp = 1, .microbatches = 1},
                                   .ranks = {{}}}),
               Error);
}

void expect_error(const ScheduleSpec& s, const std::string& what, const std::string& hint) {
  try {
    generate(s);
    ADD_FAILURE() << "no error for " << s.kind;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find(hint), std::string::npos) << e.hint();
  }
}

TEST(PipelineSchedules, SpecErrors) {
  expect_error({.kind = "zigzag", .pp = 2, .microbatches = 4}, "unknown pipeline schedule kind 'zigzag'",
               "gpipe, 1f1b, interleaved, pipedream, 2bw, zb-h1");
  expect_error({.kind = "wsp", .pp = 2, .microbatches = 4}, "not implemented", "valid kinds");
  expect_error({.kind = "1f1b-star", .pp = 4, .microbatches = 3}, "1f1b-star needs at least pp", "2BW");
  expect_error({.kind = "1f1b", .pp = 0, .microbatches = 4}, "at least 1, got 0", "pp = 1");
  expect_error({.kind = "1f1b", .pp = 2, .vp = 2, .microbatches = 4}, "vp = 2 needs the interleaved",
               "interleaved");
  expect_error({.kind = "interleaved", .pp = 4, .vp = 2, .microbatches = 6},
               "multiple of pp: 6 is not a multiple of 4", "use 4 or 8 microbatches");
  expect_error({.kind = "1f1b", .pp = 2, .microbatches = 0}, "microbatches must be at least 1", "");
  expect_error({.kind = "2bw", .pp = 4, .microbatches = 3}, "2bw needs at least pp microbatches", "");
  expect_error({.kind = "1f1b", .pp = 2, .microbatches = 4, .replicas = {2, 1}}, "pipedream option", "");
  expect_error({.kind = "pipedream", .pp = 2, .microbatches = 5, .replicas = {2, 1}},
               "cannot be split evenly", "");
  expect_error({.kind = "pipedream", .pp = 2, .microbatches = 4, .replicas = {2}}, "lists 1 stages", "");
  expect_error({.kind = "gpipe", .pp = 2, .microbatches = 4, .vertical_sync = true}, "vertical sync", "");
}

// ---- 1F1B* (MadPipe, notes-hetpipe-madpipe §C.2) ----

// The golden is hand-derived for the notes' example (§D.4): loads (4, 4, 4, 4), T = 8.
TEST(PipelineSchedules, OneFOneBStarGolden) {
  const std::string text =
      read_file(std::string(BATON_SOURCE_DIR) + "/tests/unit/golden/pipeline/1f1b-star_pp4_m8_T8.txt");
  const Program golden = parse_program(text);
  const std::vector<int> in_flight = one_f_one_b_star_in_flight({4, 4, 4, 4}, {}, 8);
  ASSERT_EQ(in_flight, (std::vector<int>{2, 2, 1, 1}));
  const Program built = generate_1f1b_star(golden.spec, in_flight);
  std::string body;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] != '#') body += line + "\n";
  EXPECT_EQ(to_text(built), body);
  EXPECT_EQ(built, golden);
  EXPECT_EQ(joined(validate(golden)), "");
  EXPECT_EQ(joined(validate(lower(golden))), "");
}

// Groups from the end with cuts as resources (§C.2 step 6): stage loads 2, cut 2 ... T = 2 gives
// every resource its own group, so the first of 3 stages stores 2·3 − 1 = 5 activations.
TEST(PipelineSchedules, OneFOneBStarGroups) {
  EXPECT_EQ(one_f_one_b_star_in_flight({4, 4, 4, 4}, {}, 4), (std::vector<int>{4, 3, 2, 1}));  // 1F1B
  EXPECT_EQ(one_f_one_b_star_in_flight({4, 4, 4, 4}, {}, 16), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(one_f_one_b_star_in_flight({1, 3, 2, 2}, {}, 4), (std::vector<int>{2, 2, 1, 1}));
  EXPECT_EQ(one_f_one_b_star_in_flight({2, 2}, {1}, 3), (std::vector<int>{2, 1}));
  EXPECT_EQ(one_f_one_b_star_in_flight({2, 2, 2}, {2, 2}, 2), (std::vector<int>{5, 3, 1}));
  EXPECT_THROW(one_f_one_b_star_in_flight({5, 1}, {}, 4), Error);
  EXPECT_THROW(one_f_one_b_star_in_flight({1, 1}, {5}, 4), Error);  // a cut above the period
  EXPECT_THROW(one_f_one_b_star_in_flight({1, 1, 1}, {1}, 4), Error);
  // The registry's 1f1b-star (equal loads, T = a stage's load) is 2bw's order under another kind.
  for (int pp = 1; pp <= 6; ++pp) {
    Program star = generate({.kind = "1f1b-star", .pp = pp, .microbatches = pp + 2, .steps = 2});
    const Program two_bw = generate({.kind = "2bw", .pp = pp, .microbatches = pp + 2, .steps = 2});
    EXPECT_EQ(star.ranks, two_bw.ranks) << pp;
  }
}

// Every non-increasing in-flight vector gives a valid program, compute-only and lowered, over
// several batches (2BW updates: one per stage per batch, at most two live versions).
TEST(PipelineSchedules, OneFOneBStarSweepValidates) {
  int programs = 0;
  for (int pp = 1; pp <= 5; ++pp)
    for (int top = 1; top <= 2 * pp - 1; ++top)
      for (int steps : {1, 3}) {
        std::vector<int> in_flight(pp);
        for (int s = 0; s < pp; ++s) in_flight[s] = std::max(1, top - s * (top + pp - 1) / pp);
        for (int m : {top, top + 1, 2 * top + 3}) {
          const ScheduleSpec spec{.kind = "1f1b-star", .pp = pp, .microbatches = std::max(m, pp),
                                  .steps = steps};
          SCOPED_TRACE(fmt::format("pp {} in-flight {} m {} steps {}", pp, fmt::join(in_flight, ","),
                                   spec.microbatches, steps));
          const Program p = generate_1f1b_star(spec, in_flight);
          ASSERT_EQ(joined(validate(p)), "");
          ASSERT_EQ(joined(validate(lower(p))), "");
          ++programs;
        }
      }
  EXPECT_GT(programs, 100);
}

TEST(PipelineSchedules, OneFOneBStarErrors) {
  auto err = [](const ScheduleSpec& s, const std::vector<int>& f, const std::string& what) {
    try {
      generate_1f1b_star(s, f);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_FALSE(e.hint().empty());
    }
  };
  err({.kind = "1f1b-star", .pp = 3, .microbatches = 4}, {2, 1}, "2 in-flight counts for pp = 3");
  err({.kind = "1f1b-star", .pp = 2, .microbatches = 4}, {1, 2}, "non-increasing");
  err({.kind = "1f1b-star", .pp = 2, .microbatches = 4}, {2, 0}, "non-increasing");
  err({.kind = "1f1b-star", .pp = 2, .microbatches = 4}, {5, 1}, "only 4");
  err({.kind = "2bw", .pp = 2, .microbatches = 4}, {2, 1}, "builds kind 1f1b-star");
}

}  // namespace
}  // namespace baton::pipeline
