#include "train/loop/trainer.h"

#include <algorithm>
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
#include "train/loop/sampler.h"
#include "model/gpt.h"
#include "train/loop/image_batches.h"
#include "train/observe/loss_spike.h"
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
void log_step(const CrossGroupSync& sync, const StepMetrics& m, int64_t steps, double mean_loss, const TimedStep& t,
              int ranks, double eta_s) {
  std::string val;
  if (m.val_loss) val = fmt::format(" | val {:.4f}", *m.val_loss);
  for (const auto& [name, value] : m.val_metrics) val += fmt::format(" {} {:.2f}%", name, 100 * value);
  log::info("{}step {:>6}/{} | loss {:.4f}{} | lr {:.2e} | norm {:.3f} | {:.0f} ms | {} {}/s | "
            "{:.3f} TFLOP/s{}{}{} | eta {}",
            sync.line_prefix(), m.step, steps, mean_loss, val, m.lr, m.grad_norm, m.step_ms,
            human_count(m.tokens_per_s), m.images_per_s ? "img" : "tok", m.tflops_per_gpu,
            m.mfu ? fmt::format(" | mfu {:.1f}%", 100 * *m.mfu) : std::string(),
            ranks > 1 ? fmt::format(" | comm {:.0f}%", 100 * t.comm_seconds / t.seconds) : std::string(),
            sync.line_suffix(m), human_duration(eta_s));
}

}  // namespace

ModelAndData model_and_data(const Config& cfg) {
  check_trainable(cfg);
  const bool gpt = cfg.model.kind == ModelKind::GPT;
  BATON_REQUIRE(!gpt || !cfg.data.train.empty(), "data.train is not set",
                "set data.train to a dataset prefix built with `baton data build`");
  ModelAndData md;
  if (!cfg.data.tokenizer.empty()) md.tokenizer = Tokenizer::load(cfg.data.tokenizer);
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

  // ---- outputs, resume ----
  preflight_outputs(cfg, session);
  const std::optional<int64_t> resumed = sync->resume(session);
  const int64_t start_step = resumed.value_or(0);
  sync->start(session, start_step);
  const std::string metrics_dir = sync->reports() ? cfg.run.dir : "";
  if (resumed && !metrics_dir.empty()) truncate_metrics_after(metrics_dir + "/" + sync->metrics_file(), start_step);
  const std::string config_path = rank0 ? write_resolved_config(cfg, cfg.run.dir) : "";
  MetricsWriter metrics(metrics_dir, resumed.has_value(), sync->metrics_file());
  log::info("run dir: {} (config {}, metrics {}, checkpoints {} every {})", cfg.run.dir, config_path,
            metrics.path(), session.checkpoint_dir(),
            cfg.checkpoint.every > 0 ? fmt::format("{} steps", cfg.checkpoint.every) : "run's end");

  // ---- loop ----
  install_stop_handlers();
  const LrSchedule sched = lr_schedule(cfg.optim, cfg.train.steps);
  TrainSummary summary;
  summary.last_step = start_step;
  int64_t saved_step = resumed ? start_step : -1;
  double lr = start_step > 0 ? sched.at(start_step - 1) : 0;
  Timer run_timer;
  double loss_window = 0;
  int window_steps = 0;
  LossSpikeGuard spikes(cfg.train.spike_factor, cfg.train.spike_window);
  StallWatchdog watchdog(cfg.run.stall_timeout_s, cfg.run.dir, session.world().rank(), session.world_size());
  for (int64_t step = start_step; step < cfg.train.steps; ++step) {
    lr = sched.at(step);
    const TimedStep t = session.step(step, lr);
    watchdog.step_done(step + 1, t.seconds);
    // The loss guard, before this step's state can reach a checkpoint.
    if (sync->holds_loss())
      if (const std::optional<std::string> spike = spikes.check(step + 1, t.result.loss))
        sync->spike(*spike, fmt::format("{}; lower optim.lr or raise optim.warmup_steps, or raise train.spike_factor "
                                        "(0 turns the check off)",
                                        saved_step >= 0 ? fmt::format("checkpoint.resume = \"auto\" restarts from "
                                                                      "step {}, before the spike", saved_step)
                                                        : std::string("no checkpoint was written before it")));
    summary.steps_done++;
    summary.last_step = step + 1;
    summary.last_loss = t.result.loss;
    loss_window += t.result.loss;
    window_steps++;

    StepMetrics m = session.metrics(step, lr, t);
    sync->after_step(session, step, m);
    const bool last = step + 1 == cfg.train.steps;
    const bool eval_now = (cfg.train.eval_every > 0 && (step + 1) % cfg.train.eval_every == 0) || last;
    if (eval_now) {
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
      log_step(*sync, m, cfg.train.steps, loss_window / window_steps, t, session.step_ranks(), eta);
    }
    if (log_now) {
      loss_window = 0;
      window_steps = 0;
    }
    if (sync->checkpoint_after(step)) {
      watchdog.phase("saving a checkpoint");
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
  sync->finish(session, summary, start_step, saved_step, lr);
  watchdog.phase("");
  session.write_trace();
  if (tokenizer && !summary.stopped_by_signal && session.model().is_whole_model() &&
      session.layout().tp() == 1 && rank0)
    log_sample(session, *tokenizer);
  return summary;
}

}  // namespace baton
