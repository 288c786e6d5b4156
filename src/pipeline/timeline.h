// Timeline: what one rank really ran, with wall-clock times (`run.trace`; docs/schedules.md "The
// measured timeline"). The executor adds every instruction it runs (RECV_*: the time blocked until
// the message arrived; compute ops, reductions and OPT_STEP: their run time; the waits for earlier
// sends a compute op or a flush's REDUCE_GRADS needs first, as SEND_WAIT), the trainer the spans of
// whole steps, evaluations and checkpoints, a virtual worker its parameter-server traffic.
//
// Invariants: times are seconds of one monotonic clock (Timeline::now; the executor times with it
// too); the events of one rank are appended in the order they end, and those of one Activity and
// op class never overlap (one thread runs them). Recording is bounded to the first `steps` steps
// begun (0 = all): outside them, and with no Timeline at all, nothing is allocated.
// Pure data: the gather over ranks and the JSON file are train/observe/run_trace.h.
#pragma once
#include <cstdint>
#include <vector>

#include "pipeline/instr.h"

namespace baton::pipeline {

enum class Activity : uint8_t {
  INSTR,       // an instruction of the program (`instr`)
  SEND_WAIT,   // blocked on earlier sends before `instr` could run
  STEP,        // a whole trainer step
  EVAL,        // an evaluation after the step
  CHECKPOINT,  // a checkpoint written after the step
  // A virtual worker's traffic with WSP's parameter server (train/hetero/wsp_stage.h): a wave's push (or,
  // on a stage that is not its VW's client, sending its part to the one that is), a pull merged
  // into the weights, and the time blocked waiting for a pull the next minibatch needs.
  WSP_PUSH,
  WSP_PULL,
  WSP_WAIT,
};

struct TimelineEvent {
  double start = 0, end = 0;  // seconds, Timeline::now()
  int64_t step = 0;           // the trainer step (1-based) it belongs to
  Activity what = Activity::INSTR;
  Instr instr;                // INSTR and SEND_WAIT
};

class Timeline {
 public:
  explicit Timeline(int64_t steps) : steps_(steps) {}
  // Seconds of the monotonic clock every event uses.
  static double now();

  // A trainer step (1-based) begins: recording holds from here until the next begin_step, while
  // fewer than `steps` steps have begun (so a step's evaluation and checkpoint are recorded with it).
  void begin_step(int64_t step);
  bool recording() const { return recording_; }
  void instr(const Instr& in, double start, double end) { add(Activity::INSTR, start, end, in); }
  void send_wait(const Instr& before, double start, double end) { add(Activity::SEND_WAIT, start, end, before); }
  void span(Activity what, double start, double end) { add(what, start, end, Instr{}); }

  const std::vector<TimelineEvent>& events() const { return events_; }
  // The steps recorded, in order.
  const std::vector<int64_t>& steps() const { return recorded_; }

 private:
  void add(Activity what, double start, double end, const Instr& in);
  int64_t steps_;
  int64_t step_ = 0;
  bool recording_ = false;
  std::vector<int64_t> recorded_;
  std::vector<TimelineEvent> events_;
};

}  // namespace baton::pipeline
