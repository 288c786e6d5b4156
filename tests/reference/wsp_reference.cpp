// A single-process reference of WSP's update rule for virtual workers (VWs) of one rank (issue 13
// item 7 and its test "Deterministic-mode WSP equals a single-process reference of the update
// rule"; docs/hetpipe.md "Deterministic mode").
//
//   wsp_reference --ranks N --out DIR [--drop-partial] CONFIG [--set KEY=VALUE]...
//
// Loads CONFIG (with the overrides) for N ranks as `baton train` does, builds the N VWs' sessions in
// this one process (each the whole model over a SelfComm, its rows of each global batch: VwRows)
// and replays the deterministic mode's order of turns
// (deterministic_turns: wsp::interleave with the run's parameters and seed). It applies the rule
// itself, on host vectors, without the parameter server or MPI:
// - the server: w_global = w0 + every wave all N VWs have pushed (c_global of them), folded when
//   the wave's last VW pushes it; a wave pushed by some VWs only waits in its own slot (the slot
//   sums the pushes in push order, then w_global += slot), so a pull returns w_global "as of
//   c_global";
// - each VW: minibatch p on w_local; u_p = w_after − w_before added to the partial wave ũ; the
//   push at the wave's end (WorkerClock decides it) adds ũ to the wave's slot and keeps it as an
//   own pushed wave; a pull (WorkerClock decides when one is outstanding; at the start of the
//   VW's turn, taken whenever c_global allows it, and required to be allowed when it gates the
//   minibatch) sets w_local = w_global + the own pushed waves not in it + ũ_partial (the merge
//   rule, docs/hetpipe.md rule 6).
// It writes DIR/metrics.jsonl (VW 0) and DIR/metrics-vw<k>.jsonl with, per minibatch: step, loss,
// grad_norm, vw, clock (c_local after it), c_global (at the VW's last pull), staleness and
// val_loss (at train.eval_every and the last step), in the trainer's JSON (nlohmann's shortest
// round-trip doubles), for e2e/test_train_wsp_deterministic.sh to compare with the run's.
// --drop-partial applies a wrong merge rule (w_local = w_global + own pushed waves, the finished
// minibatches of the wave not pushed yet dropped), which the test requires to differ: the
// comparison can fail.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "config/virtual_workers.h"
#include "core/error.h"
#include "dist/self_comm.h"
#include "optim/lr_schedule.h"
#include "train/loop/session.h"
#include "train/loop/trainer.h"
#include "train/hetero/wsp_stage.h"
#include "train/hetero/wsp_turns.h"
#include "wsp/worker_clock.h"

using namespace baton;

namespace {

// VW k's rows of each global batch: rows [k·b, (k+1)·b) of global batch p − 1 (data-parallel rank
// k's slice); validation batches the same for every VW.
class VwRows final : public BatchSource {
 public:
  VwRows(std::unique_ptr<BatchSource> inner, int row0, int rows) : inner_(std::move(inner)), row0_(row0), rows_(rows) {}
  void train_rows(int64_t step, int row, int n, HostBatch& out) const override {
    inner_->train_rows(step, row0_ + row, n, out);
  }
  bool has_valid() const override { return inner_->has_valid(); }
  void valid_rows(int batch, int rows, int row, int n, HostBatch& out) const override {
    inner_->valid_rows(batch, rows, row, n, out);
  }
  int64_t valid_samples() const override { return inner_->valid_samples(); }
  std::string describe() const override {
    return fmt::format("{} | this VW: rows [{}, {}) of each global batch", inner_->describe(), row0_, row0_ + rows_);
  }
  std::string baseline() const override { return inner_->baseline(); }

 private:
  std::unique_ptr<BatchSource> inner_;
  int row0_, rows_;
};


struct Vw {
  std::unique_ptr<TrainSession> session;
  std::unique_ptr<wsp::WorkerClock> clock;
  std::vector<float> w, after, partial;                 // w_local, scratch, ũ_partial
  std::deque<std::pair<int, std::vector<float>>> own;  // pushed waves (wave, ũ) maybe not in w_global
  int pushed = 0, c_global = 0;
  int64_t step = 0;  // minibatches done
  std::vector<nlohmann::json> rows;
};

// The parameter server's state: w_global as of c_global and one slot per wave pushed by some VWs.
struct Server {
  std::vector<float> w_global;
  std::vector<char> in_tensor;  // the parameters' positions of the flat buffer (the server holds only those)
  std::map<int, std::pair<int, std::vector<float>>> slots;  // wave → (VWs that pushed it, Σ ũ in push order)
  int c_global = 0, num_vw = 1;

  void push(int wave, const std::vector<float>& u) {
    auto& [count, slot] = slots[wave];
    if (slot.empty()) slot.assign(u.size(), 0.0f);
    for (size_t j = 0; j < u.size(); ++j)
      if (in_tensor[j]) slot[j] += u[j];
    if (++count < num_vw) return;
    BATON_ASSERT(wave == c_global, "reference: wave {} complete at c_global {}", wave, c_global);
    for (size_t j = 0; j < u.size(); ++j)
      if (in_tensor[j]) w_global[j] += slot[j];
    slots.erase(wave);
    ++c_global;
  }
};

void run(const Config& cfg, int ranks, const std::string& out, bool drop_partial) {
  const dist::Layout layout = layout_from_config(cfg, ranks, *model_and_data(cfg).builder);
  const int n = layout.num_groups();
  BATON_REQUIRE(layout.world() == n, "the reference runs virtual workers of one rank", "");
  const int rows = cfg.train.global_batch / n;
  const wsp::WspParams params{.num_vw = n, .nm = cfg.hetero.nm, .staleness = cfg.hetero.staleness};
  const std::vector<int> order = deterministic_turns(cfg, layout);
  const LrSchedule sched = lr_schedule(cfg.optim, cfg.train.steps);

  dist::SelfComm alone;
  std::vector<Vw> vw(static_cast<size_t>(n));
  Server server;
  server.num_vw = n;
  for (int k = 0; k < n; ++k) {
    Config local = cfg;  // the VW's own run over its rows of each global batch
    local.hetero = HeteroConfig{};
    local.train.global_batch = rows;
    local.dp = 1;
    ModelAndData md = model_and_data(local);
    md.data = std::make_unique<VwRows>(std::move(md.data), k * rows, rows);
    Vw& v = vw[static_cast<size_t>(k)];
    v.session = std::make_unique<TrainSession>(local, alone, std::move(md.builder), std::move(md.data));
    v.session->log_header();
    v.clock = std::make_unique<wsp::WorkerClock>(k, params, static_cast<int>(cfg.train.steps));
    SequentialModel& model = v.session->model();
    const size_t F = model.flat_size();
    v.w.resize(F);
    v.session->backend().to_host(v.w.data(), model.params(), F * sizeof(float));
    v.after.resize(F);
    v.partial.assign(F, 0.0f);
    if (k == 0) {
      server.w_global = v.w;  // w0
      server.in_tensor.assign(F, 0);
      for (int i = 0; i < model.table().size(); ++i)
        std::fill_n(server.in_tensor.begin() + static_cast<std::ptrdiff_t>(model.table().offset(i)),
                    model.table().numel(i), 1);
    }
    BATON_ASSERT(std::memcmp(v.w.data(), server.w_global.data(), F * sizeof(float)) == 0,
                 "reference: VW {} starts from other weights than VW 0 (one seed)", k);
  }

  for (size_t turn = 0; turn < order.size(); ++turn) {
    const int k = order[turn];
    Vw& v = vw[static_cast<size_t>(k)];
    SequentialModel& model = v.session->model();
    Backend& be = v.session->backend();
    const size_t F = v.w.size();
    if (const std::optional<int> needs = v.clock->waiting_for()) {
      const bool allowed = server.c_global >= *needs;
      BATON_ASSERT(allowed || v.clock->startable(),
                   "reference: turn {} (VW {}): the pull gating minibatch {} needs c_global {}, the server has {}",
                   turn, k, v.step + 1, *needs, server.c_global);
      if (allowed) {  // the merge rule
        v.c_global = server.c_global;
        while (!v.own.empty() && v.own.front().first < v.c_global) v.own.pop_front();
        v.clock->complete_pull(pulled_version(n, v.c_global, k, v.pushed, params.nm));
        v.w = server.w_global;
        for (const auto& [wave, u] : v.own)
          for (size_t j = 0; j < F; ++j) v.w[j] += u[j];
        if (drop_partial)
          std::fill(v.partial.begin(), v.partial.end(), 0.0f);
        else
          for (size_t j = 0; j < F; ++j) v.w[j] += v.partial[j];
        be.to_device(model.params(), v.w.data(), F * sizeof(float));
        model.refresh_compute_params();
      }
    }
    const int p = v.clock->start();
    const int staleness = observed_staleness(v.clock->weights_of(p), p, n);
    const int64_t step = v.step++;
    const double lr = sched.at(step);
    const TimedStep t = v.session->step(step, lr);
    be.to_host(v.after.data(), model.params(), F * sizeof(float));
    for (size_t j = 0; j < F; ++j) v.partial[j] += v.after[j] - v.w[j];
    std::swap(v.w, v.after);
    if (const std::optional<wsp::WorkerClock::Push> push = v.clock->finish()) {
      server.push(push->wave, v.partial);
      ++v.pushed;
      v.own.emplace_back(push->wave, v.partial);
      std::fill(v.partial.begin(), v.partial.end(), 0.0f);
    }
    nlohmann::json j = {{"step", step + 1},        {"loss", t.result.loss},      {"grad_norm", t.result.grad_norm},
                        {"vw", k},                 {"clock", v.clock->c_local()}, {"c_global", v.c_global},
                        {"staleness", staleness}, {"turn", turn}};
    if ((cfg.train.eval_every > 0 && (step + 1) % cfg.train.eval_every == 0) || step + 1 == cfg.train.steps)
      if (const std::optional<EvalResult> r = v.session->evaluate()) j["val_loss"] = r->loss;
    v.rows.push_back(std::move(j));
  }

  std::filesystem::create_directories(out);
  for (int k = 0; k < n; ++k) {
    const std::string path = out + "/" + (k == 0 ? std::string("metrics.jsonl") : fmt::format("metrics-vw{}.jsonl", k));
    std::ofstream f(path);
    for (const nlohmann::json& j : vw[static_cast<size_t>(k)].rows) f << j.dump() << "\n";
    BATON_REQUIRE(f.good(), fmt::format("cannot write {}", path), "check the output directory");
  }
  std::printf("wsp_reference: %d virtual workers, %zu turns, c_global %d at the end; wrote %s\n", n, order.size(),
              server.c_global, out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 0;
  std::string out, config;
  std::vector<std::string> overrides;
  bool drop_partial = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) {
      ranks = std::atoi(argv[++i]);
    } else if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else if (a == "--drop-partial") {
      drop_partial = true;
    } else if (a == "--set" && i + 1 < argc) {
      overrides.emplace_back(argv[++i]);
    } else if (config.empty() && !a.starts_with("-")) {
      config = a;
    } else {
      std::fprintf(stderr, "usage: wsp_reference --ranks N --out DIR [--drop-partial] CONFIG [--set KEY=VALUE]...\n");
      return 2;
    }
  }
  if (ranks < 1 || out.empty() || config.empty()) {
    std::fprintf(stderr, "usage: wsp_reference --ranks N --out DIR [--drop-partial] CONFIG [--set KEY=VALUE]...\n");
    return 2;
  }
  try {
    const Config cfg = load_config(config, overrides, ranks);
    BATON_REQUIRE(cfg.hetero.sync == SyncMode::WSP, "the reference replays hetero.sync = \"wsp\"", "set hetero.sync = \"wsp\"");
    run(cfg, ranks, out, drop_partial);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\nhint: %s\n", e.what(), e.hint().c_str());
    return 1;
  }
  return 0;
}
