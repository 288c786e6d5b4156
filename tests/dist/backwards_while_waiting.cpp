// The executor's dynamic order (pipeline::ExecOptions::backwards_while_waiting; HetPipe §4–5: a
// VW's stages keep computing while a pull gates its next minibatch) on the hetpipe program, pp ∈
// {2, 3}, Nm ∈ {1, 2, 3, 4}, with a fake Stage whose first stage's forwards are gated:
//  - never gated: exactly the lowered list runs, in order;
//  - every forward gated until every earlier minibatch's backward ran (the longest gate): rank 0
//    runs exactly backwards_first(list) — the order weight_ring_size_ahead sizes the ring for;
//  - seeded random gates: every instruction runs once, forwards and backwards each in minibatch
//    order, and a backward ran ahead of its static place at least once.
// In every run: each message carries its (kind, micro-batch, stage) value (slots reused early are
// caught), each compute op reads the weight version its Instr names from a ring of
// Executor::weight_versions() buffers that OPT_STEP v writes at v mod size (an undersized ring —
// weight_ring_size without the ahead orders — is caught), and run_until_update stops right after
// each requested update.
//   mpirun -np 3 backwards_while_waiting
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "dist/guard.h"
#include "pipeline/executor.h"
#include "pipeline/lower.h"
#include "pipeline/schedules.h"
#include "pipeline/stage_memory.h"

using namespace baton;
using namespace baton::pipeline;

namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
}

constexpr size_t kFloats = 4;
float act_value(int mb, int stage) { return float(mb * 100 + stage); }
float grad_value(int mb, int stage) { return float(-(mb * 100 + stage) - 1); }

class FakeStage final : public Stage {
 public:
  FakeStage(int slots, int ring, std::function<bool(int)> gate)
      : buf_(size_t(slots) * 4, std::vector<float>(kFloats, 0)), ring_(size_t(ring), -1), gate_(std::move(gate)) {
    ring_[0] = 0;  // version 0: the initial weights
  }
  size_t boundary_count(int) const override { return kFloats; }
  void* input(int, int slot) override { return buf_[size_t(slot) * 4].data(); }
  void* output(int, int slot) override { return buf_[size_t(slot) * 4 + 1].data(); }
  void* output_grad(int, int slot) override { return buf_[size_t(slot) * 4 + 2].data(); }
  void* input_grad(int, int slot) override { return buf_[size_t(slot) * 4 + 3].data(); }
  void load(int, int, int) override {}
  void forward(int stage, int mb, int slot) override {
    if (stage > 0) expect(buf_[size_t(slot) * 4][0] == act_value(mb, stage - 1), "forward input of mb " + std::to_string(mb));
    std::fill(buf_[size_t(slot) * 4 + 1].begin(), buf_[size_t(slot) * 4 + 1].end(), act_value(mb, stage));
    forwards.push_back(mb);
  }
  void backward(int stage, int mb, int slot, BackwardPart) override {
    if (!last) expect(buf_[size_t(slot) * 4 + 2][0] == grad_value(mb, stage + 1), "output gradient of mb " + std::to_string(mb));
    std::fill(buf_[size_t(slot) * 4 + 3].begin(), buf_[size_t(slot) * 4 + 3].end(), grad_value(mb, stage));
    backwards.push_back(mb);
  }
  void reduce_tied(int) override {}
  void reduce_grads(int) override {}
  void optimizer_step(int, int v) override { ring_[size_t(v) % ring_.size()] = v; }
  void select_version(int, int v) override {
    const bool ok = ring_[size_t(v) % ring_.size()] == v;
    if (undersized) {
      overwritten += !ok;
      return;
    }
    expect(ok, "version " + std::to_string(v) + " read from a ring slot holding " +
                   std::to_string(ring_[size_t(v) % ring_.size()]));
  }
  bool forward_ready(int, int mb) override { return gate_(mb); }

  bool last = false;
  bool undersized = false;  // a ring one buffer short: count the versions read after being overwritten
  int overwritten = 0;
  std::vector<int> forwards, backwards;

 private:
  std::vector<std::vector<float>> buf_;
  std::vector<int> ring_;
  std::function<bool(int)> gate_;
};

enum class Gate { NEVER, UNTIL_BACKWARDS_DONE, RANDOM };

// Returns, for an `undersized` run, how many reads found their version overwritten.
int run_case(dist::Comm& pipe, int pp, int nm, Gate gate_kind, int steps, bool undersized = false) {
  const int rank = pipe.rank();
  const ScheduleSpec spec{.kind = "hetpipe", .pp = pp, .microbatches = 1, .steps = steps, .nm = nm};
  const Program program = lower(generate(spec));
  const std::string tag = fmt::format("pp {} nm {} gate {} rank {}", pp, nm, int(gate_kind), rank);
  Executor ex(program, rank, pipe, {.record = true, .backwards_while_waiting = true});
  std::map<int, int> polls;
  Rng rng(uint64_t(1000 * pp + 10 * nm + rank));
  FakeStage* self = nullptr;
  auto gate = [&](int mb) -> bool {
    switch (gate_kind) {
      case Gate::NEVER: return true;
      case Gate::UNTIL_BACKWARDS_DONE: return static_cast<int>(self->backwards.size()) >= mb;
      case Gate::RANDOM: {
        auto [it, fresh] = polls.try_emplace(mb, 0);
        if (fresh) it->second = rng.below(2) ? int(rng.below(400)) : 0;  // polls of 50 µs
        return it->second-- <= 0;
      }
    }
    return true;
  };
  FakeStage stage(ex.slots(), ex.weight_versions() - (undersized ? 1 : 0),
                  rank == 0 ? std::function<bool(int)>(gate) : [](int) { return true; });
  stage.undersized = undersized;
  self = &stage;
  stage.last = rank == pp - 1;
  std::vector<Instr> ran;
  for (int u = 1; u <= steps; ++u) {
    const ExecStats st = ex.run_until_update(stage, u);
    ran.insert(ran.end(), st.trace.begin(), st.trace.end());
    int updates = 0;
    for (const Instr& in : ran) updates += in.op == Op::OPT_STEP;
    expect(updates == u, tag + fmt::format(": {} updates after run_until_update({})", updates, u));
  }
  expect(ex.finished(), tag + ": not finished");
  const std::vector<Instr>& list = program.ranks[size_t(rank)];
  const auto same = [](const std::vector<Instr>& a, const std::vector<Instr>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!(a[i] == b[i])) return false;
    return true;
  };
  for (size_t i = 1; i < stage.forwards.size(); ++i) expect(stage.forwards[i] == stage.forwards[i - 1] + 1, tag + ": forwards out of order");
  for (size_t i = 1; i < stage.backwards.size(); ++i) expect(stage.backwards[i] == stage.backwards[i - 1] + 1, tag + ": backwards out of order");
  expect(int(stage.forwards.size()) == steps && int(stage.backwards.size()) == steps, tag + ": not every minibatch ran");
  // A middle stage reorders on its own whenever an activation is late (not checked for an order);
  // the first stage only at its gates, the last never (its backward follows its forward).
  if (rank > 0 && rank < pp - 1) {
    expect(ran.size() == list.size(), tag + ": instruction count");
  } else if (gate_kind == Gate::NEVER || rank > 0) {
    expect(same(ran, list), tag + ": a run without gates left the lowered order");
  } else if (gate_kind == Gate::UNTIL_BACKWARDS_DONE) {
    expect(same(ran, backwards_first(list)), tag + ": the longest gates did not give backwards_first(list)");
  } else {
    expect(ran.size() == list.size(), tag + ": instruction count");
    bool moved = false;  // some backward ran before a forward the lowered list has before it
    for (size_t i = 0; i < ran.size() && !moved; ++i) moved = !(ran[i] == list[i]);
    expect(moved || nm == 1, tag + ": random gates never moved a backward ahead");
  }
  if (rank == 0 && gate_kind == Gate::UNTIL_BACKWARDS_DONE && !undersized)
    std::printf("pp %d nm %d: weight ring %d (static order %d)\n", pp, nm, ex.weight_versions(), weight_ring_size(list));
  return stage.overwritten;
}

}  // namespace

int main(int argc, char** argv) {
  dist::MpiRuntime::init(&argc, &argv);
  const int rc = dist::run_guarded([&] {
    auto world = dist::MpiRuntime::world();
    BATON_REQUIRE(world->size() == 3, "run with 3 ranks", "mpirun -np 3 backwards_while_waiting");
    for (int pp : {2, 3}) {
      auto pipe = world->split(world->rank() < pp ? 0 : 1, world->rank());
      if (world->rank() >= pp) continue;
      for (int nm : {1, 2, 3, 4}) {
        for (Gate g : {Gate::NEVER, Gate::UNTIL_BACKWARDS_DONE, Gate::RANDOM}) run_case(*pipe, pp, nm, g, 3 * nm + pp + 2);
        // The ring check can fail: one buffer fewer than weight_versions() loses a version the
        // longest gates' order still reads (rank 0; Nm = 1 keeps a single version).
        const int lost = run_case(*pipe, pp, nm, Gate::UNTIL_BACKWARDS_DONE, 3 * nm + pp + 2, nm > 1);
        if (pipe->rank() == 0 && nm > 1) expect(lost > 0, fmt::format("pp {} nm {}: an undersized ring went unnoticed", pp, nm));
      }
    }
    const double all = world->all_reduce_scalar(double(failures));
    if (world->rank() == 0) std::printf("%s: %.0f failures\n", all == 0 ? "PASS" : "FAIL", all);
    return all == 0 ? 0 : 1;
  });
  dist::MpiRuntime::finalize();
  return rc;
}
