// The pipeline executor; see executor.h for the contract and the invariants it relies on.
#include "pipeline/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "core/error.h"
#include "pipeline/schedules.h"
#include "pipeline/simulate.h"
#include "pipeline/stage_memory.h"
#include "pipeline/validate.h"

namespace baton::pipeline {
namespace {

double now() { return Timeline::now(); }  // the timeline's clock, so its spans and ExecStats agree

bool is_recv(Op op) { return op == Op::RECV_ACT || op == Op::RECV_GRAD; }

bool has_replicated_stage(const ScheduleSpec& spec) {
  return std::any_of(spec.replicas.begin(), spec.replicas.end(), [](int r) { return r > 1; });
}

}  // namespace

int Executor::tag(bool gradient, int stage, int microbatch, int num_stages) {
  return static_cast<int>(((int64_t(microbatch) * num_stages + stage) * 2 + (gradient ? 1 : 0)) % 32768);
}

Executor::Executor(Program program, int rank, dist::Comm& comm, ExecOptions options)
    : program_(std::move(program)), rank_(rank), comm_(comm), opt_(options) {
  const ScheduleSpec& spec = program_.spec;
  const ScheduleTraits& traits = program_.traits();
  const bool flush = traits.synchronous();
  BATON_ASSERT(traits.executable, "schedule kind '{}' is not executable", spec.kind);
  // Replicated stages (pipedream's 1F1B-RR): ranks are laid out by stage, the peers of every
  // SEND/RECV follow Program::rank_of (round-robin by microbatch id), and REDUCE_GRADS is the
  // Stage's collective over the stage's replicas.
  BATON_ASSERT(!has_replicated_stage(spec) || traits.replicas, "replicated stages under {}", spec.kind);
  BATON_ASSERT(program_.lowered, "the executor runs lowered programs");
  BATON_ASSERT(!flush || spec.steps == 1, "flush programs run one optimizer step per run (steps = {})",
               spec.steps);
  BATON_ASSERT(program_.num_ranks() == comm.size(), "program for {} ranks on a group of {}",
               program_.num_ranks(), comm.size());
  BATON_ASSERT(rank >= 0 && rank < comm.size() && rank == comm.rank(), "rank {} of {}", rank, comm.size());
  BATON_ASSERT(!opt_.scatter_gather || opt_.scatter_gather->size() > 1,
               "scatter/gather needs a tensor-parallel group of more than one rank");
  check_valid(program_);
  slots_ = std::max(1, memory_peaks(program_).activations[rank_]);
  plan_posts();
  // Weight versions alive together (the ring a Stage keeps): the one count the planner's memory
  // formula uses too (pipeline/stage_memory.h).
  BATON_ASSERT(!opt_.backwards_while_waiting || (!flush && spec.vp == 1),
               "backwards_while_waiting needs an asynchronous program with one chunk per rank");
  versions_ = opt_.backwards_while_waiting ? weight_ring_size_ahead(instructions()) : weight_ring_size(instructions());
}

void Executor::plan_posts() {
  // When each receive may be posted: after the last earlier instruction on the same slot (whose
  // buffers it would otherwise overwrite while still in use).
  const std::vector<Instr>& list = instructions();
  post_after_.assign(list.size(), -1);
  for (size_t i = 0; i < list.size(); ++i) {
    if (!is_recv(list[i].op)) continue;
    for (int j = static_cast<int>(i) - 1; j >= 0; --j)
      if (list[j].slot == list[i].slot && list[j].slot >= 0) {
        post_after_[i] = j;
        break;
      }
  }
}

void Executor::retarget(Program shorter) {
  BATON_ASSERT(!program_.traits().synchronous() && shorter.spec.kind == program_.spec.kind &&
                   shorter.lowered && shorter.num_ranks() == program_.num_ranks(),
               "retarget: a lowered {} program of {} ranks replaces only an asynchronous one of its kind",
               shorter.spec.kind, shorter.num_ranks());
  check_valid(shorter);
  pending_ = std::make_unique<Program>(std::move(shorter));
}

void Executor::apply_retarget(Stage& stage) {
  Program next = std::move(*pending_);
  pending_.reset();
  const std::vector<Instr>& old = instructions();
  const std::vector<Instr>& list = next.ranks[rank_];
  BATON_ASSERT(list.size() >= pc_, "retarget: {} instructions run, the shorter program has {}", pc_, list.size());
  for (size_t i = 0; i < pc_; ++i)
    BATON_ASSERT(list[i] == old[i], "retarget: instruction {} ran as {}{} but the shorter program has {}{} there", i,
                 op_mnemonic(old[i].op), old[i].microbatch, op_mnemonic(list[i].op), list[i].microbatch);
  // Posted receives follow their instruction into the new list; the others are withdrawn (their
  // micro-batches are never sent).
  std::vector<dist::RequestPtr> recv(list.size());
  for (size_t i = pc_; i < old.size(); ++i) {
    if (!recv_[i]) continue;
    const auto it = std::find_if(list.begin() + static_cast<std::ptrdiff_t>(pc_), list.end(), [&](const Instr& in) {
      return in.op == old[i].op && in.stage == old[i].stage && in.microbatch == old[i].microbatch;
    });
    if (it != list.end()) {
      BATON_ASSERT(it->slot == old[i].slot, "retarget: micro-batch {} moved from slot {} to {}", old[i].microbatch,
                   old[i].slot, it->slot);
      recv[static_cast<size_t>(it - list.begin())] = std::move(recv_[i]);
    } else {
      BATON_ASSERT(recv_[i]->cancel(), "retarget: a message of micro-batch {} ({}) arrived after the cut",
                   old[i].microbatch, op_mnemonic(old[i].op));
    }
  }
  // Instructions that ran ahead (backwards_while_waiting) are done in the new list too.
  std::vector<char> done(list.size(), 0);
  for (size_t i = pc_; i < done_.size(); ++i) {
    if (!done_[i]) continue;
    const auto it = std::find_if(list.begin() + static_cast<std::ptrdiff_t>(pc_), list.end(), [&](const Instr& in) {
      return in.op == old[i].op && in.stage == old[i].stage && in.microbatch == old[i].microbatch;
    });
    BATON_ASSERT(it != list.end(), "retarget: micro-batch {}'s {} ran ahead but the shorter program lacks it",
                 old[i].microbatch, op_mnemonic(old[i].op));
    done[static_cast<size_t>(it - list.begin())] = 1;
  }
  program_ = std::move(next);
  recv_ = std::move(recv);
  done_ = std::move(done);
  plan_posts();
  to_post_.assign(list.size() + 1, {});
  for (size_t j = pc_; j < list.size(); ++j) {
    if (!is_recv(list[j].op) || recv_[j] || done_[j]) continue;
    if (post_after_[j] < static_cast<int>(pc_)) post(stage, static_cast<int>(j));  // its point has passed
    else to_post_[post_after_[j] + 1].push_back(static_cast<int>(j));
  }
}

Executor::~Executor() {
  // A run abandoned mid-program (an error, or training stopped in the middle of an asynchronous
  // program) leaves receives posted; they are freed with their requests.
}

std::pair<size_t, size_t> Executor::payload(size_t count) const {
  if (!opt_.scatter_gather) return {0, count};
  const size_t n = static_cast<size_t>(opt_.scatter_gather->size());
  BATON_ASSERT(count % n == 0, "boundary of {} elements does not split over tp = {}", count, n);
  const size_t part = count / n;
  return {part * static_cast<size_t>(opt_.scatter_gather->rank()), part};
}

void Executor::post(Stage& stage, int i) {
  const std::vector<Instr>& list = instructions();
  const Instr& in = list[i];
  const bool grad = in.op == Op::RECV_GRAD;
  const int from_stage = grad ? in.stage + 1 : in.stage - 1;  // the sender's stage
  const int boundary = grad ? in.stage : in.stage - 1;        // the boundary crossed
  auto* buf = static_cast<char*>(grad ? stage.output_grad(in.stage, in.slot)
                                      : stage.input(in.stage, in.slot));
  const DType t = stage.boundary_dtype();
  const auto [off, n] = payload(stage.boundary_count(boundary));
  recv_[i] = comm_.recv(buf + off * dtype_size(t), n, t, in.peer,
                        tag(grad, from_stage, in.microbatch, program_.num_stages()));
}

bool Executor::wait_sends(int slot) {
  auto it = sends_.find(slot);
  if (it == sends_.end()) return false;
  for (auto& r : it->second) r->wait();
  sends_.erase(it);
  return true;
}

bool Executor::wait_all_sends() {
  const bool any = !sends_.empty();
  while (!sends_.empty()) wait_sends(sends_.begin()->first);
  return any;
}

double Executor::after_send_wait(bool waited, const Instr& in, double start) {
  if (!opt_.timeline) return start;  // only the timeline separates the wait (no clock read when off)
  const double t = now();
  if (waited) opt_.timeline->send_wait(in, start, t);
  return t;
}

void Executor::start(Stage& stage) {
  const std::vector<Instr>& list = instructions();
  pc_ = 0;
  updates_done_ = 0;
  started_ = true;
  recv_.clear();
  recv_.resize(list.size());
  done_.assign(list.size(), 0);
  sends_.clear();
  to_post_.assign(list.size() + 1, {});
  for (size_t i = 0; i < list.size(); ++i)
    if (is_recv(list[i].op)) to_post_[post_after_[i] + 1].push_back(static_cast<int>(i));
  for (int i : to_post_[0]) post(stage, i);
}

ExecStats Executor::run(Stage& stage) {
  BATON_ASSERT(program_.traits().synchronous(), "run() is for flush kinds; use run_until_update");
  ExecStats st;
  start(stage);
  advance(stage, st, INT_MAX);
  return st;
}

ExecStats Executor::run_until_update(Stage& stage, int updates) {
  ExecStats st;
  if (pc_ == 0 && !started_) start(stage);
  advance(stage, st, updates);
  return st;
}

void Executor::receive(Stage& stage, size_t i) {
  const Instr& in = instructions()[i];
  recv_[i]->wait();
  recv_[i].reset();
  if (!opt_.scatter_gather) return;
  // PTD-P scatter/gather: rebuild the whole tensor over tp.
  const bool grad = in.op == Op::RECV_GRAD;
  auto* buf = static_cast<char*>(grad ? stage.output_grad(in.stage, in.slot) : stage.input(in.stage, in.slot));
  const DType t = stage.boundary_dtype();
  const auto [off, n] = payload(stage.boundary_count(grad ? in.stage : in.stage - 1));
  opt_.scatter_gather->all_gather(buf + off * dtype_size(t), buf, n, t);
}

size_t Executor::send(Stage& stage, const Instr& in) {
  const bool grad = in.op == Op::SEND_GRAD;
  const auto* buf = static_cast<const char*>(grad ? stage.input_grad(in.stage, in.slot)
                                                  : stage.output(in.stage, in.slot));
  const DType t = stage.boundary_dtype();
  const auto [off, n] = payload(stage.boundary_count(grad ? in.stage - 1 : in.stage));
  sends_[in.slot].push_back(comm_.send(buf + off * dtype_size(t), n, t, in.peer,
                                       tag(grad, in.stage, in.microbatch, program_.num_stages())));
  return n * dtype_size(t);
}

void Executor::compute(Stage& stage, const Instr& in, ExecStats& st, double start) {
  stage.select_version(in.stage, in.weight_version);
  const int c = in.stage / program_.spec.pp;  // chunk c of rank r is model stage c·pp + r
  if (in.op == Op::FWD) {
    stage.forward(in.stage, in.microbatch, in.slot);
    st.fwd[c] += now() - start;
    st.fwd_count[c]++;
    return;
  }
  stage.backward(in.stage, in.microbatch, in.slot,
                 in.op == Op::BWD         ? BackwardPart::FULL
                 : in.op == Op::BWD_INPUT ? BackwardPart::INPUT
                                          : BackwardPart::WEIGHT);
  const bool weight = in.op == Op::BWD_WEIGHT;
  (weight ? st.wgt : st.bwd)[c] += now() - start;
  (weight ? st.wgt_count : st.bwd_count)[c]++;
}

bool Executor::forward_waits(Stage& stage, size_t i) {
  const Instr& in = instructions()[i];
  if (in.op == Op::RECV_ACT) return recv_[i] && !recv_[i]->test();
  if (in.op == Op::FWD) return !stage.forward_ready(in.stage, in.microbatch);
  return false;
}

std::pair<size_t, size_t> Executor::backward_ahead(size_t i, bool* pending) {
  const std::vector<Instr>& list = instructions();
  const int k = list[i].microbatch;
  *pending = false;
  size_t j = i + 1;
  while (j < list.size() && (done_[j] || (list[j].op != Op::RECV_GRAD && list[j].op != Op::BWD))) {
    if (!done_[j] && (list[j].op == Op::FWD || list[j].op == Op::RECV_ACT) && list[j].microbatch != k)
      return {0, 0};  // a later forward comes first
    ++j;
  }
  // Only a minibatch this rank has forwarded (forwards run in order: one before k).
  if (j >= list.size() || list[j].microbatch >= k) return {0, 0};
  *pending = true;
  if (list[j].op == Op::RECV_GRAD && !(recv_[j] && recv_[j]->test())) return {0, 0};
  size_t e = j;
  while (e < list.size() && list[e].op != Op::OPT_STEP) {
    const Op op = list[e].op;
    BATON_ASSERT(op != Op::FWD && op != Op::LOAD && op != Op::RECV_ACT && op != Op::SEND_ACT,
                 "backwards_while_waiting: micro-batch {}'s backward group holds a forward op", list[j].microbatch);
    ++e;
  }
  BATON_ASSERT(e < list.size(), "backwards_while_waiting: micro-batch {}'s backward has no update", list[j].microbatch);
  return {j, e + 1};
}

void Executor::execute(Stage& stage, ExecStats& st, size_t i, double t0) {
  const Instr& in = instructions()[i];
  const double start = now();
  double begin = start;  // where the instruction's own work starts (after waits for sends)
  switch (in.op) {
    case Op::RECV_ACT:
    case Op::RECV_GRAD:
      receive(stage, i);
      st.recv_wait += now() - start;
      break;
    case Op::SEND_ACT:
    case Op::SEND_GRAD: st.bytes_sent += send(stage, in); break;
    case Op::FWD:
    case Op::BWD:
    case Op::BWD_INPUT:
    case Op::BWD_WEIGHT:
      // The slot's previous output may still be on its way.
      begin = after_send_wait(wait_sends(in.slot), in, start);
      compute(stage, in, st, start);
      st.compute += now() - start;
      st.last_compute_end = now() - t0;
      break;
    case Op::LOAD:  // the slot's data buffers; its pending sends read other buffers
      stage.load(in.stage, in.microbatch, in.slot);
      break;
    case Op::REDUCE_TIED:
      stage.reduce_tied(in.stage);
      st.update += now() - start;
      break;
    case Op::REDUCE_GRADS:
      // Flush kinds: every message of the step has been sent; finish them before the
      // collectives. Asynchronous kinds keep their sends in flight across updates.
      if (program_.traits().synchronous()) begin = after_send_wait(wait_all_sends(), in, start);
      stage.reduce_grads(in.stage);
      st.update += now() - start;
      break;
    case Op::OPT_STEP:
      stage.optimizer_step(in.stage, in.weight_version);
      st.update += now() - start;
      ++updates_done_;
      ++st.updates;
      break;
  }
  if (opt_.record) st.trace.push_back(in);
  if (opt_.timeline) opt_.timeline->instr(in, begin, now());
}

void Executor::advance(Stage& stage, ExecStats& st, int stop_after_updates) {
  const int vp = program_.spec.vp;
  for (auto* v : {&st.fwd, &st.bwd, &st.wgt}) v->assign(vp, 0);
  for (auto* v : {&st.fwd_count, &st.bwd_count, &st.wgt_count}) v->assign(vp, 0);
  const double t0 = now();
  if (pending_) apply_retarget(stage);
  // The list is read afresh each time: retarget() may replace it after any instruction.
  while (pc_ < instructions().size() && updates_done_ < stop_after_updates) {
    const size_t i = pc_;
    if (done_[i]) {  // ran ahead; its receives were posted then
      ++pc_;
      continue;
    }
    if (opt_.backwards_while_waiting && forward_waits(stage, i)) {
      bool pending = false;
      const auto [b, e] = backward_ahead(i, &pending);
      if (b < e) {  // the oldest forwarded minibatch's backward and update, before the forward
        for (size_t j = b; j < e; ++j) {
          execute(stage, st, j, t0);
          done_[j] = 1;
          for (int r : to_post_[j + 1]) post(stage, r);
        }
        if (pending_) apply_retarget(stage);
        continue;  // the forward is tried again (or the call ends at its update count)
      }
      if (pending) {  // a backward will become ready: poll it and the forward
        const double start = now();
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        st.recv_wait += now() - start;
        continue;
      }
      // Nothing else to run: wait in the forward itself.
    }
    execute(stage, st, i, t0);
    ++pc_;
    if (pending_) apply_retarget(stage);  // posts what the new list needs now
    else for (int j : to_post_[i + 1]) post(stage, j);
  }
  if (pc_ >= instructions().size()) {
    wait_all_sends();
    for (auto& r : recv_) BATON_ASSERT(!r, "a receive was posted but never waited");
  }
  st.total = now() - t0;
}

void run_forward_only(Stage& stage, dist::Comm& comm, int pp, int vp, int microbatches, int slot) {
  const int S = pp * vp, rank = comm.rank();
  for (int k = 0; k < microbatches; ++k)
    for (int s = rank; s < S; s += pp) {
      if (s > 0)
        comm.recv(stage.input(s, slot), stage.boundary_count(s - 1), stage.boundary_dtype(), (s - 1) % pp,
                  Executor::tag(false, s - 1, k, S))->wait();
      stage.select_version(s, -1);  // -1: the current (latest) weights
      if (s == 0 || s == S - 1) stage.load(s, k, slot);
      stage.forward(s, k, slot);
      if (s + 1 < S)
        comm.send(stage.output(s, slot), stage.boundary_count(s), stage.boundary_dtype(), (s + 1) % pp,
                  Executor::tag(false, s, k, S))->wait();
    }
}

}  // namespace baton::pipeline
