// A single-process reference of WSP's update rule (issue 23 item 2; docs/hetpipe.md "The rules" and
// "Deterministic mode"), written from the HetPipe paper (§4, §5) and the merge rule docs/hetpipe.md
// defines (rule 6). It shares no code with src/wsp or the WSP runtime (src/train/hetero): its clocks,
// server and weights are its own, below. It uses the trainer only to compute one minibatch on given
// weights (a TrainSession over the whole model, one process) and to load the config.
//
//   wsp_reference --run RUN_DIR --out DIR [--mutate RULE] CONFIG [--set KEY=VALUE]...
//
// RUN_DIR is a deterministic `baton train` run with run.trace on (hetero.deterministic = true): its
// WSP traces (wsp-trace-vw<v>-stage<s>.jsonl) give the number of VWs, each VW's stage count and the
// order in which the VWs' first stages called their server hooks — F(k) before the forward of
// minibatch k, U(j) after the update of j (train/hetero/wsp_turns.h). That order is the run's
// choice; the reference checks it is one the rule admits and computes what the rule says for it:
//
// - Weights. Every VW keeps its updates u_1, u_2, … (double). Its weight version j is
//       W(j) = w_global(X) + Σ_{i = X·Nm + 1 … j} u_i,
//   X the c_global of the VW's last merge at a boundary b ≤ j (0: none, w_global(0) = w0). That is
//   rule 6 (w_local = w_global + the own finished updates not in it) for every version at or after
//   the merge's boundary; versions before b keep the older X.
// - w_global(X) = w0 + Σ_{c < X} Σ_VW ũ_{VW,c}, ũ_{VW,c} = Σ u over the VW's wave c (minibatches
//   c·Nm + 1 … (c+1)·Nm): the server folds a wave once every VW pushed it (rule 3).
// - Minibatch k reads version r(k) = k − L (L = Nm in flight for a pipelined VW: "the local updates
//   1 … p − Nm", HetPipe §4; L = 1 for a one-stage VW, which uses the latest weights), and never
//   before the segment's start a (a checkpoint drains the pipeline): r(k) = max(k − L, a). Its
//   gradient is computed on W(r(k)) at F(k); u_k is the optimizer's step from that gradient (with
//   optim.weight_decay = 0 for pipelined VWs the step depends on the gradients only, so it is the
//   same applied to any version; the reference refuses weight decay there: a stage's decay term
//   would see a merge at a time the rule does not fix).
// - Clocks (rules 2, 4, 5): U((c+1)·Nm) pushes wave c; if c ≥ D the VW asks for w_global with
//   c_global ≥ c − D + 1 (else c_local becomes c + 1 at once). At each F(k) while the pull is
//   outstanding: if c_global allows it, the VW merges (X = c_global, b = (c+1)·Nm) and c_local
//   becomes c + 1; minibatch (c+2)·Nm may not start without it (the order would be infeasible: an
//   error). At a checkpoint (the end of each segment) every VW merges every pushed wave.
// - Per minibatch it writes what the runtime's trace says of the same minibatch ("start" records):
//   c_local and c_global at its start, the version vector of the weights it reads
//   ({VW: [[first, last]]}: every VW's 1 … X·Nm, own X·Nm + 1 … r(k)) and the staleness (how many of
//   the newest minibatch indices 1 … k − 1 some VW's updates are missing from), and per step the
//   loss, grad norm and validation loss (at train.eval_every and the last step, on W(j) after
//   update j) in metrics.jsonl / metrics-vw<k>.jsonl.
// --mutate applies a wrong rule, which the test requires to be told apart:
//   forget-own   a merge drops the VW's own pushed waves that w_global does not hold yet;
//   one-older    minibatch k reads version r(k) − 1 (a local staleness one too many);
//   drop-partial a merge drops the VW's own updates after the boundary b (the partial wave).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "core/error.h"
#include "dist/self_comm.h"
#include "optim/lr_schedule.h"
#include "train/loop/session.h"
#include "train/loop/trainer.h"

using namespace baton;
using nlohmann::json;

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

// ---- the run's trace: its shape and its order of hooks ----

struct Hook {
  int vw = 0;
  bool forward = true;
  int64_t mb = 0;
};

struct RunShape {
  int num_vw = 0, nm = 0, d = 0;
  std::vector<int> stages;  // per VW
  std::vector<Hook> order;
};

RunShape read_run(const std::string& dir) {
  RunShape run;
  std::map<int64_t, Hook> by_turn;
  const std::regex name(R"(wsp-trace-vw(\d+)-stage(\d+)\.jsonl)");
  std::map<int, int> stages;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (!std::regex_match(file, m, name)) continue;
    const int vw = std::stoi(m[1]), stage = std::stoi(m[2]);
    std::ifstream in(entry.path());
    std::string line;
    int runs = 0;
    while (std::getline(in, line)) {
      const json e = json::parse(line);
      const std::string kind = e.at("e");
      if (kind == "run") {
        BATON_REQUIRE(++runs == 1 && e.at("first_step") == 0 && e.at("deterministic") == true,
                      fmt::format("{}: the reference replays one deterministic run from step 0", file),
                      "run baton train once with hetero.deterministic = true and run.trace = true");
        run.num_vw = e.at("num_vw");
        run.nm = e.at("nm");
        run.d = e.at("D");
        stages[vw] = e.at("stages");
      } else if (stage == 0 && (kind == "start" || kind == "update")) {
        by_turn[e.at("turn").get<int64_t>()] = Hook{vw, kind == "start", e.at("mb").get<int64_t>()};
      }
    }
  }
  BATON_REQUIRE(run.num_vw > 0 && static_cast<int>(stages.size()) == run.num_vw,
                fmt::format("{} holds traces of {} VWs' first stages, the run says {} VWs", dir, stages.size(), run.num_vw),
                "point --run at the run.dir of a run with run.trace = true");
  for (const auto& [vw, n] : stages) run.stages.push_back(n);
  int64_t expect = 0;
  for (const auto& [turn, hook] : by_turn) {
    BATON_REQUIRE(turn == expect++, fmt::format("the trace's turns skip from {} to {}", expect - 1, turn),
                  "the run's traces are incomplete");
    run.order.push_back(hook);
  }
  return run;
}

// ---- the rule ----

using Vec = std::vector<double>;

struct Merge {
  int64_t b, x;
};

struct Vw {
  std::unique_ptr<TrainSession> session;
  int stages = 1;
  std::vector<Vec> u;            // u[i]: update i (u[0] unused)
  std::vector<Merge> merges;     // in order: b and X increase
  int pushed = 0, c_local = 0;
  std::optional<std::pair<int, int>> pull;  // outstanding: (clock c, c_global needed)
  int64_t segment = 0;           // the current segment's first step
  std::vector<json> rows;
};

struct Rule {
  int n = 0, nm = 0, d = 0;
  std::string mutate;
  Vec w0;
  std::vector<std::vector<Vec>> waves;  // waves[c][vw]: ũ (empty until pushed)
  std::vector<char> in_tensor;          // the flat buffer's parameter positions
  int c_global = 0;

  int last_x(const Vw& v, int64_t j) const {
    int64_t x = 0;
    for (const Merge& m : v.merges)
      if (m.b <= j) x = m.x;
    return static_cast<int>(x);
  }
  Vec w_global(int x) const {
    Vec w = w0;
    for (int c = 0; c < x; ++c)
      for (int k = 0; k < n; ++k)
        for (size_t j = 0; j < w.size(); ++j) w[j] += waves[c][k][j];
    return w;
  }
  // W(j) of VW v: rule 6 for every version at or after the last merge's boundary.
  Vec weights(const Vw& v, int64_t j) const {
    const int x = last_x(v, j);
    Vec w = w_global(x);
    int64_t b = 0;
    for (const Merge& m : v.merges)
      if (m.b <= j) b = m.b;
    for (int64_t i = int64_t{x} * nm + 1; i <= j; ++i) {
      if (mutate == "forget-own" && i <= b) continue;  // own pushed waves not in w_global
      if (mutate == "drop-partial" && i > b && b > 0 && i <= dropped_until(v, b)) continue;
      for (size_t k = 0; k < w.size(); ++k) w[k] += v.u[static_cast<size_t>(i)][k];
    }
    return w;
  }
  // --mutate drop-partial: the updates a merge at boundary b found finished beyond b.
  std::map<std::pair<const Vw*, int64_t>, int64_t> partial_at_merge;
  int64_t dropped_until(const Vw& v, int64_t b) const {
    const auto it = partial_at_merge.find({&v, b});
    return it == partial_at_merge.end() ? b : it->second;
  }
  // The version vector of W(j) as {VW: [[first, last]]}, and its staleness for minibatch k.
  std::pair<json, int> tag(const Vw& v, int vw, int64_t j, int64_t k) const {
    const int x = last_x(v, j);
    json out = json::object();
    int64_t reach = k - 1;
    for (int q = 0; q < n; ++q) {
      const int64_t last = q == vw ? j : int64_t{x} * nm;
      if (last >= 1) out[std::to_string(q)] = json::array({json::array({1, last})});
      reach = std::min(reach, last);
    }
    return {out, static_cast<int>(k - 1 - reach)};
  }
};

void to_device(TrainSession& s, const Vec& w, const std::vector<char>& in_tensor) {
  SequentialModel& model = s.model();
  std::vector<float> f(w.size());
  s.backend().to_host(f.data(), model.params(), f.size() * sizeof(float));  // keeps whatever lies between tensors
  for (size_t j = 0; j < f.size(); ++j)
    if (in_tensor[j]) f[j] = static_cast<float>(w[j]);
  s.backend().to_device(model.params(), f.data(), f.size() * sizeof(float));
  model.refresh_compute_params();
}

void run(const Config& cfg, const RunShape& shape, const std::string& out, const std::string& mutate) {
  const int n = shape.num_vw, nm = shape.nm;
  BATON_REQUIRE(n >= 1 && nm == cfg.hetero.nm && shape.d == cfg.hetero.staleness,
                "the run's trace and the config disagree on Nm or D", "give the run's config and overrides");
  const int rows = cfg.train.global_batch / n;
  const LrSchedule sched = lr_schedule(cfg.optim, cfg.train.steps);
  const int64_t every = cfg.checkpoint.every > 0 ? cfg.checkpoint.every : cfg.train.steps;
  for (int s : shape.stages)
    BATON_REQUIRE(s == 1 || cfg.optim.weight_decay == 0,
                  "the reference computes a pipelined VW's update on the whole model at once; with weight decay a "
                  "stage's step depends on when that stage merged",
                  "set optim.weight_decay = 0 for runs with pipelined virtual workers");

  Rule rule{.n = n, .nm = nm, .d = shape.d, .mutate = mutate};
  dist::SelfComm alone;
  std::vector<Vw> vw(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    Config local = cfg;  // the VW's own run over its rows of each global batch, on one process
    local.hetero = HeteroConfig{};
    local.train.global_batch = rows;
    local.dp = 1;
    local.run.trace = false;
    ModelAndData md = model_and_data(local);
    // The rows come from the job's global batches (an image source numbers its samples by them).
    md.data = std::make_unique<VwRows>(std::move(model_and_data(cfg).data), k * rows, rows);
    Vw& v = vw[static_cast<size_t>(k)];
    v.stages = shape.stages[static_cast<size_t>(k)];
    v.session = std::make_unique<TrainSession>(local, alone, std::move(md.builder), std::move(md.data));
    SequentialModel& model = v.session->model();
    std::vector<float> w(model.flat_size());
    v.session->backend().to_host(w.data(), model.params(), w.size() * sizeof(float));
    v.u.assign(static_cast<size_t>(cfg.train.steps) + 1, Vec());
    if (k == 0) {
      rule.w0.assign(w.begin(), w.end());
      rule.in_tensor.assign(w.size(), 0);
      for (int i = 0; i < model.table().size(); ++i)
        std::fill_n(rule.in_tensor.begin() + static_cast<std::ptrdiff_t>(model.table().offset(i)),
                    model.table().numel(i), 1);
    }
    BATON_ASSERT(Vec(w.begin(), w.end()) == rule.w0, "reference: VW {} starts from other weights (one seed)", k);
  }
  rule.waves.assign(static_cast<size_t>(cfg.train.steps / nm) + 1, std::vector<Vec>(static_cast<size_t>(n)));
  std::vector<int> pushed_waves(static_cast<size_t>(n), 0);
  std::vector<json> starts;

  const auto merge = [&](Vw& v, int64_t latest) {
    const int64_t b = int64_t{v.pushed} * nm;
    v.merges.push_back({b, rule.c_global});
    rule.partial_at_merge[{&v, b}] = latest;
    v.c_local = v.pull->first + 1;
    v.pull.reset();
  };
  std::vector<int64_t> done(static_cast<size_t>(n), 0);  // updates applied per VW
  for (size_t t = 0; t < shape.order.size(); ++t) {
    const Hook& h = shape.order[t];
    Vw& v = vw[static_cast<size_t>(h.vw)];
    if (h.forward) {
      // A new segment (the run's first, or after a checkpoint) starts when every VW met: all
      // merged every pushed wave (rule at a checkpoint).
      const int64_t seg = (h.mb - 1) / every * every;
      if (seg != v.segment) {
        BATON_REQUIRE(std::all_of(done.begin(), done.end(), [&](int64_t x) { return x >= seg; }),
                      fmt::format("turn {}: VW {} starts segment {} before every VW finished the last", t, h.vw, seg), "");
        for (Vw& q : vw)
          if (q.pull && q.segment != seg) {
            merge(q, seg);
          }
        for (Vw& q : vw) q.segment = seg;
      }
      if (v.pull) {
        const int64_t gate = int64_t{v.pull->first + 2} * nm;
        if (rule.c_global >= v.pull->second)
          merge(v, done[static_cast<size_t>(h.vw)]);
        else
          BATON_REQUIRE(h.mb < gate,
                        fmt::format("turn {}: VW {} starts minibatch {} while its pull needs c_global {} and the server "
                                    "has {}: the order breaks the rule",
                                    t, h.vw, h.mb, v.pull->second, rule.c_global),
                        "");
      }
      const int64_t lag = v.stages > 1 ? nm : 1;
      const int64_t r = std::max(h.mb - lag - (mutate == "one-older" ? 1 : 0), v.segment);
      BATON_REQUIRE(done[static_cast<size_t>(h.vw)] >= r,
                    fmt::format("turn {}: VW {}'s minibatch {} reads version {} before its update", t, h.vw, h.mb, r), "");
      const auto [w_tag, staleness] = rule.tag(v, h.vw, r, h.mb);
      starts.push_back({{"vw", h.vw}, {"mb", h.mb}, {"reads", r}, {"c_local", v.c_local},
                        {"c_global", v.merges.empty() ? 0 : v.merges.back().x}, {"staleness", staleness}, {"w", w_tag}});
      // The minibatch's gradient on W(r), its optimizer step: u = W' − W(r).
      const Vec w = rule.weights(v, r);
      to_device(*v.session, w, rule.in_tensor);
      const TimedStep ts = v.session->step(h.mb - 1, sched.at(h.mb - 1));
      std::vector<float> after(w.size());
      v.session->backend().to_host(after.data(), v.session->model().params(), after.size() * sizeof(float));
      Vec& u = v.u[static_cast<size_t>(h.mb)];
      u.assign(w.size(), 0.0);
      for (size_t j = 0; j < w.size(); ++j)
        if (rule.in_tensor[j]) u[j] = static_cast<double>(after[j]) - static_cast<double>(static_cast<float>(w[j]));
      v.rows.push_back({{"step", h.mb}, {"loss", ts.result.loss}, {"grad_norm", ts.result.grad_norm}, {"vw", h.vw}});
    } else {
      BATON_REQUIRE(h.mb == done[static_cast<size_t>(h.vw)] + 1,
                    fmt::format("turn {}: VW {} updates {} after {}", t, h.vw, h.mb, done[static_cast<size_t>(h.vw)]), "");
      done[static_cast<size_t>(h.vw)] = h.mb;
      if (h.mb % nm == 0) {  // the end of wave c: push ũ; the pull of clock c (rules 2–5)
        const int c = static_cast<int>(h.mb / nm) - 1;
        Vec& slot = rule.waves[static_cast<size_t>(c)][static_cast<size_t>(h.vw)];
        slot.assign(rule.w0.size(), 0.0);
        for (int64_t i = int64_t{c} * nm + 1; i <= h.mb; ++i)
          for (size_t j = 0; j < slot.size(); ++j) slot[j] += v.u[static_cast<size_t>(i)][j];
        v.pushed = c + 1;
        pushed_waves[static_cast<size_t>(h.vw)] = c + 1;
        rule.c_global = *std::min_element(pushed_waves.begin(), pushed_waves.end());
        if (c >= rule.d)
          v.pull = std::make_pair(c, c - rule.d + 1);
        else
          v.c_local = c + 1;
      }
      const bool eval = (cfg.train.eval_every > 0 && h.mb % cfg.train.eval_every == 0) || h.mb == cfg.train.steps;
      if (eval) {
        to_device(*v.session, rule.weights(v, h.mb), rule.in_tensor);
        if (const std::optional<EvalResult> e = v.session->evaluate()) {
          json& row = v.rows[static_cast<size_t>(h.mb - 1)];
          BATON_ASSERT(row.at("step") == h.mb, "reference: rows out of order");
          row["val_loss"] = e->loss;
        }
      }
    }
  }

  std::filesystem::create_directories(out);
  const auto write = [&](const std::string& path, const std::vector<json>& lines) {
    std::ofstream f(path);
    for (const json& j : lines) f << j.dump() << "\n";
    BATON_REQUIRE(f.good(), fmt::format("cannot write {}", path), "check the output directory");
  };
  for (int k = 0; k < n; ++k)
    write(out + "/" + (k == 0 ? std::string("metrics.jsonl") : fmt::format("metrics-vw{}.jsonl", k)),
          vw[static_cast<size_t>(k)].rows);
  write(out + "/starts.jsonl", starts);
  std::printf("wsp_reference: %d virtual workers (stages %s), Nm %d, D %d, %zu hooks replayed, c_global %d at the "
              "end%s; wrote %s\n",
              n, fmt::format("{}", fmt::join(shape.stages, ",")).c_str(), nm, shape.d, shape.order.size(),
              rule.c_global, mutate.empty() ? "" : fmt::format(" (mutation: {})", mutate).c_str(), out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string run_dir, out, config, mutate;
  std::vector<std::string> overrides;
  const char* usage = "usage: wsp_reference --run RUN_DIR --out DIR [--mutate forget-own|one-older|drop-partial] CONFIG "
                      "[--set KEY=VALUE]...\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--run" && i + 1 < argc) {
      run_dir = argv[++i];
    } else if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else if (a == "--mutate" && i + 1 < argc) {
      mutate = argv[++i];
    } else if (a == "--set" && i + 1 < argc) {
      overrides.emplace_back(argv[++i]);
    } else if (config.empty() && !a.starts_with("-")) {
      config = a;
    } else {
      std::fputs(usage, stderr);
      return 2;
    }
  }
  if (run_dir.empty() || out.empty() || config.empty() ||
      !(mutate.empty() || mutate == "forget-own" || mutate == "one-older" || mutate == "drop-partial")) {
    std::fputs(usage, stderr);
    return 2;
  }
  try {
    const RunShape shape = read_run(run_dir);
    int ranks = 0;
    for (int s : shape.stages) ranks += s;
    const Config cfg = load_config(config, overrides, ranks);
    BATON_REQUIRE(cfg.hetero.sync == SyncMode::WSP, "the reference replays hetero.sync = \"wsp\"",
                  "set hetero.sync = \"wsp\"");
    run(cfg, shape, out, mutate);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\nhint: %s\n", e.what(), e.hint().c_str());
    return 1;
  }
  return 0;
}
