#include "train/loop/trainer.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/bytes.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "core/timer.h"
#include "data/indexed_dataset.h"
#include "data/token_loader.h"
#include "data/tokenizer.h"
#include "optim/lr_schedule.h"
#include "train/observe/metrics.h"
#include "train/observe/tensorboard.h"
#include "train/loop/sampler.h"
#include "model/gpt.h"
#include "train/loop/image_batches.h"
#include "train/observe/divergence_guard.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "dist/agree.h"
#include "pipeline/schedules.h"
#include "train/loop/preflight.h"
#include "train/observe/stall_watchdog.h"
#include "train/loop/session.h"

namespace baton {
namespace {

std::string human_duration(double s) {
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::unique_ptr<IndexedDataset> open_dataset(const std::string& prefix, int vocab,
                                             const std::string& vocab_source) {
  auto ds = IndexedDataset::open(prefix);
  check_tokenizer_matches(*ds, vocab, vocab_source);
  return ds;
}

// Entropy (nats) of the unigram distribution of the first `limit` tokens: the loss of a model that
// learned token frequencies and nothing else, the baseline a trained model must beat.
double unigram_entropy(const IndexedDataset& ds, int vocab, int64_t limit = int64_t(1) << 24) {
  const int64_t n = std::min(ds.num_tokens(), limit);
  std::vector<int64_t> counts(vocab, 0);
  std::vector<int32_t> chunk(1 << 16);
  for (int64_t pos = 0; pos < n; pos += static_cast<int64_t>(chunk.size())) {
    const int64_t k = std::min<int64_t>(static_cast<int64_t>(chunk.size()), n - pos);
    ds.read_tokens(pos, k, chunk.data());
    for (int64_t i = 0; i < k; ++i) counts[chunk[i]]++;
  }
  double h = 0;
  for (int64_t c : counts)
    if (c > 0) h -= (double(c) / n) * std::log(double(c) / n);
  return h;
}

// The configured Megatron datasets (data.train, optional data.valid), checked against the
// vocabulary; rows come from their TokenLoaders.
class DatasetTokens final : public BatchSource {
 public:
  DatasetTokens(const Config& cfg, const GptDims& dims) : cfg_(cfg), vocab_(dims.vocab), T_(dims.seq_len) {
    const std::string vocab_source =
        cfg.model.vocab_size > 0 ? "model.vocab_size" : "tokenizer '" + cfg.data.tokenizer + "'";
    train_ds_ = open_dataset(cfg.data.train, dims.vocab, vocab_source);
    if (!cfg.data.valid.empty()) valid_ds_ = open_dataset(cfg.data.valid, dims.vocab, vocab_source);
    train_ = std::make_unique<TokenLoader>(*train_ds_, dims.seq_len, cfg.train.seed);
    if (valid_ds_) valid_ = std::make_unique<TokenLoader>(*valid_ds_, dims.seq_len, cfg.train.seed);
  }
  void train_rows(int64_t step, int row, int n, HostBatch& out) const override {
    shape(out, n);
    train_->train_rows(step, row, n, out.tokens.data(), out.targets.data());
    if (step == bad_batch_) scramble(out);
  }
  bool has_valid() const override { return valid_ != nullptr; }
  int64_t valid_samples() const override { return valid_ ? valid_->eval_windows() : 0; }
  void valid_rows(int batch, int rows, int row, int n, HostBatch& out) const override {
    shape(out, n);
    valid_->eval_rows(batch, rows, row, n, out.tokens.data(), out.targets.data());
  }
  std::string describe() const override {
    return fmt::format("train {} ({} tokens){}", cfg_.data.train,
                       human_count(static_cast<double>(train_ds_->num_tokens())),
                       valid_ds_ ? fmt::format(", valid {} ({} tokens)", cfg_.data.valid,
                                               human_count(static_cast<double>(valid_ds_->num_tokens())))
                                 : std::string(", no validation set"));
  }
  std::string baseline() const override {
    return fmt::format("unigram entropy of the training tokens = {:.3f} nats (a model that learned "
                       "only token frequencies scores this)", unigram_entropy(*train_ds_, vocab_));
  }

 private:
  void shape(HostBatch& out, int n) const {
    out.B = n;
    out.T = T_;
    out.tokens.resize(size_t(n) * T_);
    out.targets.resize(size_t(n) * T_);
  }
  // Test-only fault injection (like BATON_CKPT_FAIL_AT): BATON_FAULT_BAD_BATCH=N makes data step
  // N's tokens and targets noise, the corrupt stretch of a real corpus that spikes the loss — so
  // that train.on_spike = "rewind" is tested on a real spike that skipping the batch removes.
  void scramble(HostBatch& out) const {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < out.tokens.size(); ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      out.tokens[i] = static_cast<int32_t>(x % static_cast<uint64_t>(vocab_));
      out.targets[i] = static_cast<int32_t>((x >> 32) % static_cast<uint64_t>(vocab_));
    }
  }
  static int64_t bad_batch_from_env() {
    const char* v = std::getenv("BATON_FAULT_BAD_BATCH");
    return v ? std::stoll(v) : -1;
  }
  const int64_t bad_batch_ = bad_batch_from_env();
  const Config cfg_;  // a copy: a data source outlives the config it was built from
  int vocab_, T_;
  std::unique_ptr<IndexedDataset> train_ds_, valid_ds_;
  std::unique_ptr<TokenLoader> train_, valid_;
};


// Sampling needs the full logits and the whole model: tp = pp = 1; one replica is enough.
void log_sample(TrainSession& session, const Tokenizer& tokenizer) {
  SampleOptions so;
  so.seed = session.config().train.seed;
  so.tokens = 48;
  const std::string prompt = "The";
  std::vector<int32_t> ids = tokenizer.encode(prompt);
  const std::vector<int32_t> more = sample_tokens(session.model(), ids, so);
  ids.insert(ids.end(), more.begin(), more.end());
  log::info("sample: {}", tokenizer.decode(ids));
}

// One logged step: loss (mean over the steps since the last line), validation loss and metrics,
// LR, norm, step time, throughput, MFU when known, communication share with several ranks, ETA,
// and the cross-group strategy's part.
void log_step(const CrossGroupSync& sync, const StepMetrics& m, int64_t steps, double mean_loss, double eta_s) {
  std::string val;
  if (m.val_loss) val = fmt::format(" | val {:.4f}", *m.val_loss);
  for (const auto& [name, value] : m.val_metrics) val += fmt::format(" {} {:.2f}%", name, 100 * value);
  log::info("{}step {:>6}/{} | loss {:.4f}{} | lr {:.2e} | norm {:.3f} | {:.0f} ms | {} {}/s | "
            "{:.3f} TFLOP/s{}{}{} | eta {}",
            sync.line_prefix(), m.step, steps, mean_loss, val, m.lr, m.grad_norm, m.step_ms,
            human_count(m.tokens_per_s), m.images_per_s ? "img" : "tok", m.tflops_per_gpu,
            m.mfu ? fmt::format(" | mfu {:.1f}%", 100 * *m.mfu) : std::string(),
            m.comm_share ? fmt::format(" | comm {:.0f}%", 100 * *m.comm_share) : std::string(),
            sync.line_suffix(m), human_duration(eta_s));
}

// After a spike flagged at `spike_step` in a lockstep job: rank 0 sets the checkpoints that hold
// the spike's weights aside and pins the last good one (checkpoint_dir.h); every rank learns its
// path ("" = none).
std::string set_aside(TrainSession& session, int64_t spike_step) {
  dist::Comm& world = session.world();
  std::string good, problem;
  if (world.rank() == 0) {
    try {
      good = set_aside_after_spike(session.checkpoint_dir(), spike_step);
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  dist::agree_on_problems(world, problem, "check checkpoint.dir's permissions and free space");
  return world.broadcast_string(good, 0);
}

// A step the divergence guard flagged (`what`): stops the job, or (train.on_spike = "rewind")
// reloads the last good checkpoint, skips the data batches since it and returns the step to go on
// from. Nothing after the spike is ever saved.
int64_t on_spike(const Config& cfg, TrainSession& session, CrossGroupSync& sync, DivergenceGuard& guard,
                 int64_t spike_step, const std::string& what, int& rewinds) {
  const std::string lower = "lower optim.lr or raise optim.warmup_steps, or raise train.spike_factor, "
                            "spike_ceiling or spike_norm_factor (0 turns a rule off)";
  if (!sync.can_rewind()) sync.spike(what, fmt::format("checkpoint.resume = \"auto\" restarts from the newest "
                                                       "checkpoint; {}", lower));
  const std::string good = set_aside(session, spike_step);
  const std::string name = std::filesystem::path(good).filename().string();
  if (cfg.train.on_spike == "rewind" && !good.empty() && rewinds < cfg.train.max_rewinds) {
    const int64_t next_data_step = spike_step + session.data_offset();
    const CheckpointMeta meta = session.rewind(good, next_data_step);
    const int64_t skip = next_data_step - meta.data_position;
    guard.restore(meta.guard_state);
    ++rewinds;
    log::warn("{}: rewinding to {} (step {}) and skipping the {} data batches since it (rewind {} of {})", what,
              name, meta.step, skip, rewinds, cfg.train.max_rewinds);
    return meta.step;
  }
  const std::string why = cfg.train.on_spike != "rewind" ? ""
                          : good.empty()                 ? " (no checkpoint before it to rewind to)"
                                                         : fmt::format(" after {} rewinds (train.max_rewinds)", rewinds);
  sync.spike(what + why,
             fmt::format("{}; {}", good.empty() ? "no checkpoint was written before it"
                                                : fmt::format("checkpoint.resume = \"auto\" restarts from {}, before "
                                                              "the spike (later ones were set aside as .spike)", name),
                         lower));
  std::abort();  // spike() throws; the compiler does not see [[noreturn]] through the virtual call
}

}  // namespace

DivergenceRules divergence_rules(const Config& cfg, const ModelBuilder& builder) {
  const auto& t = cfg.train;
  const double classes = cfg.model.kind == ModelKind::GPT ? gpt_dims_of(builder).vocab : cfg.model.classes;
  return {.factor = t.spike_factor, .window = t.spike_window, .ceiling = t.spike_ceiling,
          .norm_factor = t.spike_norm_factor, .uniform_loss = std::log(classes)};
}

ModelAndData model_and_data(const Config& cfg) {
  check_trainable(cfg);
  const bool gpt = cfg.model.kind == ModelKind::GPT;
  BATON_REQUIRE(!gpt || !cfg.data.train.empty(), "data.train is not set",
                "set data.train to a dataset prefix built with `baton data build`");
  ModelAndData md;
  if (!cfg.data.tokenizer.empty()) md.tokenizer = load_tokenizer(cfg.data);
  md.builder = model_builder(cfg, md.tokenizer ? md.tokenizer->vocab_size() : 0);
  if (gpt)
    md.data = std::make_unique<DatasetTokens>(cfg, gpt_dims_of(*md.builder));
  else
    md.data = make_image_batches(cfg);
  return md;
}

TrainSummary train(const Config& cfg, dist::Comm& world, const SyncFactory& make_sync) {
  ModelAndData md = model_and_data(cfg);
  std::unique_ptr<Tokenizer> tokenizer = std::move(md.tokenizer);
  const std::unique_ptr<CrossGroupSync> sync =
      make_sync(cfg, world, layout_from_config(cfg, world.size(), *md.builder));
  TrainSession session(cfg, world, std::move(md.builder), std::move(md.data), sync->session_options());
  const bool rank0 = session.rank0();
  session.log_header();
  sync->attach(session);

  // The watchdog from here: a resume that hangs on a stuck file system is a stall too.
  StallWatchdog watchdog(cfg.run.stall_timeout_s, cfg.run.dir, session.world().rank(), session.world_size());
  // A first save at a slow disk's 10 MB/s; later saves and evaluations: 10x their last duration.
  watchdog.expect("saving a checkpoint", std::max(120.0, session.checkpoint_bytes_estimate() / 10e6));

  // ---- outputs, resume ----
  preflight_outputs(cfg, session);
  const std::optional<int64_t> resumed = sync->resume(session);
  if (!resumed) session.init_from_pretrained();  // model.init_from: a checkpoint, when there is one, wins
  const int64_t start_step = resumed.value_or(0);
  sync->start(session, start_step);
  const std::string metrics_dir = sync->reports() ? cfg.run.dir : "";
  if (resumed && !metrics_dir.empty()) truncate_metrics_after(metrics_dir + "/" + sync->metrics_file(), start_step);
  const std::string config_path = rank0 ? write_resolved_config(cfg, cfg.run.dir) : "";
  MetricsWriter metrics(metrics_dir, resumed.has_value(), sync->metrics_file());
  // run.tensorboard: the same records as scalars, from the rank that writes the metrics file: rank 0's
  // in run.dir; under virtual workers VW k's in run.dir/vw<k> (one TensorBoard run per VW).
  if (cfg.run.tensorboard && !metrics_dir.empty()) {
    const dist::Layout& layout = session.layout();
    const std::string dir = layout.virtual_workers()
                                ? fmt::format("{}/vw{}", metrics_dir, layout.place(session.world().rank()).group)
                                : metrics_dir;
    metrics.also_to(std::make_unique<TensorBoardWriter>(tensorboard_file_path(dir), start_step + 1));
  }
  log::info("run dir: {} (config {}, metrics {}{}, checkpoints {} every {})", cfg.run.dir, config_path,
            metrics.path(), metrics.tensorboard() ? ", TensorBoard " + metrics.tensorboard()->path() : std::string(),
            session.checkpoint_dir(),
            cfg.checkpoint.every > 0 ? fmt::format("{} steps", cfg.checkpoint.every) : "run's end");

  // ---- loop ----
  // Every rank decides alike (the same config and sync): one report for the job.
  if (cfg.train.on_spike == "rewind" &&
      !(sync->can_rewind() && pipeline::schedule_traits(cfg.parallel.schedule).synchronous()))
    throw AgreedError(fmt::format("train.on_spike = \"rewind\" needs a job that steps in lockstep with a flushing "
                                  "schedule (this run: {})", sync->can_rewind() ? "schedule " + cfg.parallel.schedule
                                                                               : std::string("virtual workers")),
                      "use train.on_spike = \"stop\" and resume from the newest checkpoint");
  install_stop_handlers();
  const LrSchedule sched = lr_schedule(cfg.optim, cfg.train.steps);
  TrainSummary summary;
  summary.last_step = start_step;
  int64_t saved_step = resumed ? start_step : -1;
  double lr = start_step > 0 ? sched.at(start_step - 1) : 0;
  Timer run_timer;
  double loss_window = 0;
  int window_steps = 0;
  DivergenceGuard guard(divergence_rules(cfg, session.model().builder()));
  guard.restore(session.resumed_guard_state());
  int rewinds = 0;
  for (int64_t step = start_step; step < cfg.train.steps; ++step) {
    lr = sched.at(step);
    const TimedStep t = session.step(step, lr);
    watchdog.step_done(step + 1, t.seconds);
    // The divergence guard, before this step's state can reach a checkpoint.
    if (sync->holds_loss())
      if (const std::optional<std::string> flagged = guard.check(step + 1, t.result.loss, t.result.grad_norm)) {
        const int64_t back = on_spike(cfg, session, *sync, guard, step + 1, *flagged, rewinds);
        metrics.rewind_to(back);  // and the TensorBoard file's restart
        saved_step = back;
        loss_window = 0;
        window_steps = 0;
        step = back - 1;  // the loop goes on with step `back`
        continue;
      }
    summary.steps_done++;
    summary.last_step = step + 1;
    summary.last_loss = t.result.loss;
    loss_window += t.result.loss;
    window_steps++;

    StepMetrics m = session.metrics(step, lr, t);
    m.rewinds = rewinds;
    m.batches_skipped = session.data_offset();  // every rewind's, a resumed run's too
    sync->after_step(session, step, m);
    const bool last = step + 1 == cfg.train.steps;
    const bool eval_now = (cfg.train.eval_every > 0 && (step + 1) % cfg.train.eval_every == 0) || last;
    if (eval_now) {
      // A first evaluation: eval_steps forward passes, each within 10x this step's time.
      watchdog.expect("evaluating", std::max(120.0, 10.0 * cfg.train.eval_steps * t.seconds));
      watchdog.phase("evaluating");
      if (const std::optional<EvalResult> r = session.evaluate()) {
        m.val_loss = r->loss;
        const std::vector<std::string> names = session.model().builder().metric_names();
        for (size_t i = 0; i < names.size(); ++i) m.val_metrics.emplace_back(names[i], r->metrics[i]);
        summary.last_val_loss = m.val_loss;
        summary.last_val_metrics = m.val_metrics;
      }
    }
    const bool evaluated = m.val_loss.has_value();
    const bool log_now = (step + 1) % cfg.train.log_every == 0 || last || step == 0 || evaluated;
    if (log_now && sync->reports()) {
      metrics.write(m);
      const double eta = run_timer.seconds() / (step + 1 - start_step) * (cfg.train.steps - step - 1);
      log_step(*sync, m, cfg.train.steps, loss_window / window_steps, eta);
    }
    if (log_now) {
      loss_window = 0;
      window_steps = 0;
    }
    if (sync->checkpoint_after(step)) {
      watchdog.phase("saving a checkpoint");
      session.set_guard_state(guard.state());
      if (std::string path = sync->save(session, step, lr); !path.empty()) {
        summary.checkpoint_path = std::move(path);
        saved_step = step + 1;
      }
    }
    watchdog.phase("");
    if (sync->stop_after(session, step)) {
      summary.stopped_by_signal = true;
      log::info("stop requested (signal {}): stopping after step {}", stop_signal_number(), step + 1);
      break;
    }
  }

  // ---- final checkpoint (also when stopped by a signal), the strategy's summary, a sample ----
  watchdog.phase("saving a checkpoint");
  session.set_guard_state(guard.state());
  sync->finish(session, summary, start_step, saved_step, lr);
  watchdog.phase("");
  session.write_trace();
  if (tokenizer && !summary.stopped_by_signal && session.model().is_whole_model() &&
      session.layout().tp() == 1 && rank0)
    log_sample(session, *tokenizer);
  return summary;
}

}  // namespace baton
