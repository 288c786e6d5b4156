// The measured timeline (run.trace): the Timeline's bounded recording, the Chrome-trace writer's
// JSON (escaping, process and track names), and the job's trace document built from per-rank
// events — measured processes per rank with their tracks, the prediction beside them, idle shares.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dist/layout.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/timeline.h"
#include "pipeline/trace.h"
#include "train/observe/run_trace.h"

namespace baton {
namespace {

using pipeline::Activity;
using pipeline::Instr;
using pipeline::Op;
using pipeline::Timeline;
using pipeline::TimelineEvent;

TEST(Timeline, RecordsOnlyTheFirstStepsAndTheirSpans) {
  Timeline t(2);
  t.instr(Instr{}, 0, 1);  // before any step: nothing
  EXPECT_TRUE(t.events().empty());
  t.begin_step(5);
  t.instr({.op = Op::FWD, .stage = 0, .microbatch = 0}, 1, 2);
  t.begin_step(6);
  t.span(Activity::STEP, 2, 3);
  t.span(Activity::CHECKPOINT, 3, 4);  // after step 6, recorded with it
  t.begin_step(7);                     // the third step: off from here
  t.instr({.op = Op::FWD}, 4, 5);
  EXPECT_FALSE(t.recording());
  ASSERT_EQ(t.events().size(), 3u);
  EXPECT_EQ(t.events()[0].step, 5);
  EXPECT_EQ(t.events()[2].what, Activity::CHECKPOINT);
  EXPECT_EQ(t.events()[2].step, 6);
  EXPECT_EQ(t.steps(), (std::vector<int64_t>{5, 6}));
  Timeline all(0);  // 0: every step
  for (int s = 1; s <= 50; ++s) all.begin_step(s);
  EXPECT_TRUE(all.recording());
  EXPECT_EQ(all.steps().size(), 50u);
}

TEST(ChromeTrace, WritesValidJsonWithEscapedNames) {
  pipeline::ChromeTrace t;
  t.process(3, "rank \"3\"\\x\n", 7);
  t.thread(3, 1, "receive wait");
  t.complete(3, 1, "F0", "FWD", 1.5, 2.25, R"("step":1)");
  t.complete(3, 1, "B0", "BWD", 4, 1);
  const auto j = nlohmann::json::parse(t.str());
  const auto& ev = j["traceEvents"];
  std::string name;
  int sort = -1, complete = 0;
  for (const auto& e : ev) {
    if (e["name"] == "process_name") name = e["args"]["name"];
    if (e["name"] == "process_sort_index") sort = e["args"]["sort_index"];
    if (e["ph"] == "X") ++complete;
  }
  EXPECT_EQ(name, "rank \"3\"\\x\n");
  EXPECT_EQ(sort, 7);
  EXPECT_EQ(complete, 2);
  EXPECT_EQ(ev.back()["args"].size(), 0u);
  EXPECT_DOUBLE_EQ(ev[ev.size() - 2]["dur"].get<double>(), 2.25);
  EXPECT_EQ(ev[ev.size() - 2]["args"]["step"], 1);
}

// A pp = 2 1f1b step "measured" with F = 1 s and B = 2 s on both ranks and messages that take no
// time: the events follow the simulator's own start times, so the prediction matches them exactly.
std::vector<std::vector<TimelineEvent>> fake_run(const pipeline::Program& p, int64_t step, double t0) {
  pipeline::Costs c = pipeline::Costs::uniform(p, 1, 2);
  const pipeline::SimResult sim = pipeline::simulate(p, c);
  std::vector<std::vector<TimelineEvent>> out(p.num_ranks());
  for (int r = 0; r < p.num_ranks(); ++r)
    for (size_t i = 0; i < p.ranks[r].size(); ++i)
      out[r].push_back({.start = t0 + sim.start[r][i], .end = t0 + sim.end[r][i], .step = step,
                        .what = Activity::INSTR, .instr = p.ranks[r][i]});
  return out;
}

TEST(RunTrace, MeasuredRanksAndPredictionInOneDocument) {
  const pipeline::Program p = pipeline::lower(pipeline::generate({.kind = "1f1b", .pp = 2, .microbatches = 4}));
  const dist::Layout layout = dist::Layout::grid(1, 1, {.pp = 2, .stages = {{0, 2}, {2, 4}}});
  auto ranks = fake_run(p, 1, 0);
  const auto second = fake_run(p, 2, 100);
  for (int r = 0; r < 2; ++r) {
    ranks[r].insert(ranks[r].end(), second[r].begin(), second[r].end());
    ranks[r].push_back({.start = 120, .end = 121, .step = 2, .what = Activity::CHECKPOINT});
  }
  RunTraceSummary s;
  const auto j = nlohmann::json::parse(run_trace_json(ranks, layout, p, &s));
  std::map<int, std::string> names;
  std::map<int, std::vector<std::string>> compute;  // pid -> compute event names in order
  int checkpoints = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["name"] == "process_name") names[e["pid"]] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    if (e["tid"] == 0) compute[e["pid"]].push_back(e["name"]);
    if (e["name"] == "checkpoint") {
      ++checkpoints;
      EXPECT_EQ(e["tid"], 5);
    }
  }
  EXPECT_EQ(names[0], "rank 0: stage 0, group 0");
  EXPECT_EQ(names[1], "rank 1: stage 1, group 0");
  EXPECT_EQ(names[2], "predicted (simulator, measured costs): pipeline rank 0");
  EXPECT_EQ(checkpoints, 2);
  // 1F1B on rank 0 (pp 2, 4 micro-batches): two warm-up forwards, then one F one B.
  const std::vector<std::string> step0 = {"F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"};
  ASSERT_EQ(compute[0].size(), 16u);
  EXPECT_EQ(std::vector<std::string>(compute[0].begin(), compute[0].begin() + 8), step0);
  // The prediction is drawn once per measured step, from the measured medians (F 1, B 2): the same
  // compute events as measured.
  EXPECT_EQ(compute[2], compute[0]);
  EXPECT_EQ(compute[3], compute[1]);
  // Idle: rank 0 computes 12 of the step's makespan; the prediction agrees with the measurement.
  const pipeline::SimResult sim = pipeline::simulate(p, pipeline::Costs::uniform(p, 1, 2));
  ASSERT_EQ(s.idle_share.size(), 2u);
  EXPECT_NEAR(s.idle_share[0], 1 - 12 / sim.makespan, 1e-9);
  EXPECT_NEAR(s.predicted_idle_share[0], s.idle_share[0], 1e-9);
  EXPECT_GT(s.idle_share[0], 0.1);  // (p − 1)/(m + p − 1) of the step: the bubble
}

}  // namespace
}  // namespace baton
