// validate(): ranges and allowed values of every key (from the key table), then the combinations
// that no single key can check. Errors name the key and the `file:line` it was set at
// (Config::origins); for a combination, the line of the key set last (the one most likely edited).
#include <algorithm>
#include <initializer_list>

#include "config/config.h"
#include "config/virtual_workers.h"
#include "config/config_keys.h"
#include "core/error.h"
#include "pipeline/schedules.h"

namespace baton {
namespace {

using config_detail::KeyDesc;

// Where `key` was set, or "(default)" when no file line or --set gave it.
std::string where(const Config& cfg, const std::string& key) {
  if (auto it = cfg.origins.find(key); it != cfg.origins.end()) return it->second.where;
  return "(default)";
}

// The location of whichever of `keys` was set last; "(default)" when none was set.
std::string latest(const Config& cfg, std::initializer_list<const char*> keys) {
  const KeyOrigin* best = nullptr;
  for (const char* k : keys)
    if (auto it = cfg.origins.find(k); it != cfg.origins.end())
      if (!best || it->second.order > best->order) best = &it->second;
  return best ? best->where : where(cfg, *keys.begin());
}

void check_key(const Config& cfg, const KeyDesc& key) {
  Config& c = const_cast<Config&>(cfg);  // the table's accessors serve reads and writes
  std::visit(
      [&](auto get) {
        const auto& v = get(c);
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
          if (!key.range.contains(static_cast<double>(v)))
            throw Error(fmt::format("{}: {} must be {}, got {}", where(cfg, key.full_name()),
                                    key.full_name(), key.range.describe(),
                                    config_detail::format_field(key, cfg)),
                        fmt::format("set {} ({}) to a value {}", key.full_name(), key.doc,
                                    key.range.describe()));
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          for (size_t i = 0; i < v.size(); ++i)
            if (!key.range.contains(v[i]))
              throw Error(fmt::format("{}: {}[{}] must be {}, got {}", where(cfg, key.full_name()), key.full_name(),
                                      i, key.range.describe(), config_detail::toml_float(v[i])),
                          fmt::format("set every entry of {} ({}) to a value {}", key.full_name(), key.doc,
                                      key.range.describe()));
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!key.allowed.empty() &&
              std::find(key.allowed.begin(), key.allowed.end(), v) == key.allowed.end())
            throw Error(
                fmt::format("{}: {} = {} is not an allowed value", where(cfg, key.full_name()),
                            key.full_name(), config_detail::toml_string(v)),
                config_detail::suggest_value(key, v));
          if (key.non_empty && v.empty())
            throw Error(fmt::format("{}: {} must not be empty", where(cfg, key.full_name()),
                                    key.full_name()),
                        fmt::format("set {} ({})", key.full_name(), key.doc));
        }
      },
      key.field);
}

[[noreturn]] void inconsistent(const std::string& at, const std::string& what,
                               const std::string& hint) {
  throw Error(fmt::format("{}: {}", at, what), hint);
}

// The model's own arithmetic: a GPT's heads divide its width.
void check_model(const Config& cfg) {
  const auto& m = cfg.model;
  if (m.kind == ModelKind::GPT && m.d_model % m.n_head != 0)
    inconsistent(
        latest(cfg, {"model.d_model", "model.n_head"}),
        fmt::format("model.n_head = {} does not divide model.d_model = {}", m.n_head, m.d_model),
        fmt::format("each head gets d_model / n_head channels: use a d_model that is a "
                    "multiple of {} (e.g. {}), or another n_head",
                    m.n_head, (m.d_model / m.n_head + 1) * m.n_head));
}

// precision.attention names a GPU kernel of a GPT's bf16 attention: anything else is an error, as
// is a head size the named kernel lacks (the flash kernel: 32, 64, 128; cuDNN's fused attention: a
// multiple of 8 up to 128, its documented limits). The device is checked where it is chosen
// (backend/device.cpp: "auto" may pick the CPU).
void check_precision(const Config& cfg) {
  const auto& p = cfg.precision;
  if (p.attention == "auto") return;
  const auto& m = cfg.model;
  if (m.kind != ModelKind::GPT)
    inconsistent(latest(cfg, {"precision.attention", "model.kind"}),
                 fmt::format("precision.attention = \"{}\" selects a transformer's attention kernel, but "
                             "model.kind = \"{}\"",
                             p.attention, to_string(m.kind)),
                 "drop precision.attention (or set it to \"auto\")");
  if (p.compute != "bf16")
    inconsistent(latest(cfg, {"precision.attention", "precision.compute"}),
                 fmt::format("precision.attention = \"{}\" is a bf16 kernel, but precision.compute = \"{}\"",
                             p.attention, p.compute),
                 "set precision.compute = \"bf16\", or precision.attention = \"auto\"");
  if (p.device == "cpu")
    inconsistent(latest(cfg, {"precision.attention", "precision.device"}),
                 fmt::format("precision.attention = \"{}\" selects a CUDA kernel, but precision.device = \"cpu\"",
                             p.attention),
                 "set precision.attention = \"auto\" on the CPU, or precision.device = \"cuda\"");
  if (m.n_head <= 0 || m.d_model % m.n_head != 0) return;  // check_model's error
  const int hs = m.d_model / m.n_head;
  const bool ok = p.attention == "flash" ? (hs == 32 || hs == 64 || hs == 128) : (hs % 8 == 0 && hs <= 128);
  if (!ok)
    inconsistent(latest(cfg, {"precision.attention", "model.d_model", "model.n_head"}),
                 fmt::format("precision.attention = \"{}\" has no head size {} (d_model {} / n_head {})",
                             p.attention, hs, m.d_model, m.n_head),
                 p.attention == "flash"
                     ? "the flash kernel handles head sizes 32, 64 and 128: change d_model or n_head, or use "
                       "precision.attention = \"auto\""
                     : "cuDNN's fused attention handles head sizes that are multiples of 8 up to 128: change "
                       "d_model or n_head, or use precision.attention = \"auto\"");
}

// The optimizer's keys: the learning-rate range and schedule, and no key of the other optimizer.
void check_optimizer(const Config& cfg) {
  const auto& o = cfg.optim;
  if (o.min_lr > o.lr)
    inconsistent(latest(cfg, {"optim.min_lr", "optim.lr"}),
                 fmt::format("optim.min_lr = {} is greater than optim.lr = {}",
                             config_detail::toml_float(o.min_lr), config_detail::toml_float(o.lr)),
                 "the learning rate decays from optim.lr to optim.min_lr: set min_lr <= lr "
                 "(e.g. min_lr = lr / 10)");

  // Keys of one optimizer set for the other would be ignored: each is an error instead.
  const OptimConfig defaults_o;
  if (o.decay == "step" && o.step_size <= 0)
    inconsistent(latest(cfg, {"optim.decay", "optim.step_size"}),
                 "optim.decay = \"step\" needs optim.step_size > 0",
                 "set optim.step_size to the steps between learning-rate drops (e.g. a third of the run)");
  if (o.kind == "adamw" && (o.nesterov || o.momentum != defaults_o.momentum))
    inconsistent(latest(cfg, {"optim.nesterov", "optim.momentum", "optim.kind"}),
                 "optim.momentum / optim.nesterov are SGD's, but optim.kind = \"adamw\"",
                 "set optim.kind = \"sgd\", or drop momentum and nesterov (AdamW uses beta1 and beta2)");
  if (o.kind == "adamw" && o.weight_decay_mode != "decoupled")
    inconsistent(latest(cfg, {"optim.weight_decay_mode", "optim.kind"}),
                 "AdamW's weight decay is decoupled by definition; optim.weight_decay_mode = \"l2\" "
                 "needs optim.kind = \"sgd\"",
                 "use weight_decay_mode = \"decoupled\" with adamw, or optim.kind = \"sgd\"");
  if (o.kind == "sgd" && (o.beta1 != defaults_o.beta1 || o.beta2 != defaults_o.beta2 || o.eps != defaults_o.eps))
    inconsistent(latest(cfg, {"optim.beta1", "optim.beta2", "optim.eps", "optim.kind"}),
                 "optim.beta1 / beta2 / eps are AdamW's, but optim.kind = \"sgd\"",
                 "drop them, or set optim.kind = \"adamw\"");
}

// Keys of image models set for a GPT, or of a GPT set for a CNN, would be ignored: each is an error;
// so are a CNN's datasets without their labels and the GPT-only parallel options.
void check_model_kind_keys(const Config& cfg) {
  const auto& m = cfg.model;
  const ModelConfig defaults_m;
  const DataConfig defaults_d;
  if (m.kind == ModelKind::GPT && (m.in_channels != defaults_m.in_channels || m.classes != defaults_m.classes ||
                          m.width != defaults_m.width || m.batch_norm != defaults_m.batch_norm ||
                          m.image_size != defaults_m.image_size))
    inconsistent(latest(cfg, {"model.in_channels", "model.classes", "model.width", "model.batch_norm",
                              "model.image_size"}),
                 "model.image_size / in_channels / classes / width / batch_norm describe CNNs, but "
                 "model.kind = \"gpt\"",
                 "drop them, or set model.kind = \"resnet\" or \"vgg\"");
  if (m.kind == ModelKind::GPT && (!cfg.data.train_labels.empty() || !cfg.data.valid_labels.empty() ||
                          cfg.data.synthetic || cfg.data.augment != defaults_d.augment ||
                          cfg.data.normalize != defaults_d.normalize || cfg.data.format != defaults_d.format ||
                          !cfg.data.mean.empty() || !cfg.data.std.empty() ||
                          cfg.data.eval_resize != defaults_d.eval_resize))
    inconsistent(latest(cfg, {"data.train_labels", "data.valid_labels", "data.synthetic", "data.augment",
                              "data.normalize", "data.format", "data.mean", "data.std", "data.eval_resize"}),
                 "data.train_labels / valid_labels / synthetic / augment / normalize / format / mean / std / "
                 "eval_resize are for image "
                 "datasets, but model.kind = \"gpt\"",
                 "drop them (a GPT reads token datasets: data.train, data.valid, data.tokenizer)");
  if (cfg.train.steps == 0 && (trains_virtual_workers(cfg.hetero) ||
                                !pipeline::schedule_traits(cfg.parallel.schedule).synchronous()))
    inconsistent(latest(cfg, {"train.steps", "parallel.schedule"}),
                 "train.steps = 0 (save the starting weights) needs a job without virtual workers and a flushing schedule",
                 "save step 0 with parallel.schedule = \"1f1b\" and no hetero.virtual_workers / hetero.sync (any "
                 "layout loads it), then resume from it");
  if (!m.init_from.empty() && (m.init_from.rfind("hf:", 0) != 0 || m.init_from.size() == 3))
    inconsistent(where(cfg, "model.init_from"),
                 fmt::format("model.init_from = \"{}\" is not \"hf:DIR\"", m.init_from),
                 "name a Hugging Face GPT-2 directory (model.safetensors + config.json, e.g. written by "
                 "`baton ckpt export CKPT --format hf DIR`) as \"hf:DIR\", or drop the key");
  if (!m.init_from.empty() && m.kind != ModelKind::GPT)
    inconsistent(latest(cfg, {"model.init_from", "model.kind"}),
                 fmt::format("model.init_from loads GPT-2 weights, but model.kind = \"{}\"", to_string(m.kind)),
                 "drop model.init_from (a CNN starts from its random initialisation or a baton checkpoint)");
  if (m.kind != ModelKind::GPT) {
    if (m.n_head != defaults_m.n_head || m.d_model != defaults_m.d_model || m.seq_len != defaults_m.seq_len ||
        m.vocab_size != defaults_m.vocab_size || !cfg.data.tokenizer.empty() || !cfg.data.vocab_file.empty() ||
        !cfg.data.merge_file.empty())
      inconsistent(latest(cfg, {"model.n_head", "model.d_model", "model.seq_len", "model.vocab_size",
                                "data.tokenizer", "data.vocab_file", "data.merge_file"}),
                   fmt::format("model.n_head / d_model / seq_len / vocab_size and data.tokenizer describe a "
                               "GPT, but model.kind = \"{}\"", to_string(m.kind)),
                   "drop them (a CNN is model.n_layer (its depth), image_size, in_channels, classes, width)");
    if (cfg.data.synthetic && (!cfg.data.train.empty() || !cfg.data.valid.empty()))
      inconsistent(latest(cfg, {"data.synthetic", "data.train", "data.valid"}),
                   "data.synthetic = true generates the images, but data.train / data.valid name datasets",
                   "drop data.train / data.valid, or data.synthetic");
    const bool folder = cfg.data.format == "image_folder";
    if (folder && (!cfg.data.train_labels.empty() || !cfg.data.valid_labels.empty()))
      inconsistent(latest(cfg, {"data.format", "data.train_labels", "data.valid_labels"}),
                   "data.format = \"image_folder\" takes the labels from the sub-folder names, but "
                   "data.train_labels / valid_labels are set",
                   "drop data.train_labels / valid_labels (the classes are root/<class>/ folders)");
    if (!folder && (!cfg.data.mean.empty() || !cfg.data.std.empty() ||
                    cfg.data.eval_resize != defaults_d.eval_resize))
      inconsistent(latest(cfg, {"data.format", "data.mean", "data.std", "data.eval_resize"}),
                   "data.mean / std / eval_resize are for data.format = \"image_folder\" (IDX datasets "
                   "normalise with the training images' statistics: data.normalize)",
                   "drop them, or set data.format = \"image_folder\"");
    if (folder && (cfg.data.mean.size() != cfg.data.std.size() ||
                   (!cfg.data.mean.empty() && cfg.data.mean.size() != size_t(m.in_channels))))
      inconsistent(latest(cfg, {"data.mean", "data.std", "model.in_channels"}),
                   fmt::format("data.mean has {} values and data.std {}, model.in_channels is {}",
                               cfg.data.mean.size(), cfg.data.std.size(), m.in_channels),
                   "give one mean and one std per input channel (e.g. mean = [0.286], std = [0.353]), or "
                   "neither (pixels x/255)");
    for (double v : cfg.data.std)
      if (!(v > 0))
        inconsistent(where(cfg, "data.std"), fmt::format("data.std holds {}: it divides", v),
                     "every data.std value must be > 0");
    if (folder && cfg.data.eval_resize != 0 && cfg.data.eval_resize < m.image_size)
      inconsistent(latest(cfg, {"data.eval_resize", "model.image_size"}),
                   fmt::format("data.eval_resize = {} is smaller than the centre crop model.image_size = {}",
                               cfg.data.eval_resize, m.image_size),
                   "set data.eval_resize >= model.image_size, or 0 (image_size·256/224)");
    if (!folder && !cfg.data.train.empty() && cfg.data.train_labels.empty())
      inconsistent(where(cfg, "data.train"), "data.train names images but data.train_labels is not set",
                   "set data.train_labels to the IDX labels file of the training images");
    if (!folder && !cfg.data.valid.empty() && cfg.data.valid_labels.empty())
      inconsistent(where(cfg, "data.valid"), "data.valid names images but data.valid_labels is not set",
                   "set data.valid_labels to the IDX labels file of the validation images");
    if ((!cfg.data.train_labels.empty() && cfg.data.train.empty()) ||
        (!cfg.data.valid_labels.empty() && cfg.data.valid.empty()))
      inconsistent(latest(cfg, {"data.train_labels", "data.valid_labels"}),
                   "data.train_labels / valid_labels are set without the images they label (data.train / "
                   "data.valid)",
                   "set the images file too, or drop the labels");
    if (cfg.parallel.tp != 1)
      inconsistent(latest(cfg, {"parallel.tp", "model.kind"}),
                   fmt::format("parallel.tp = {}: CNNs have no tensor-parallel layers", cfg.parallel.tp),
                   "set parallel.tp = 1 and split a CNN with pipelines (parallel.pp) and data parallelism");
    if (cfg.parallel.recompute != "none")
      inconsistent(where(cfg, "parallel.recompute"),
                   fmt::format("parallel.recompute = \"{}\" recomputes a GPT's transformer blocks; a CNN's "
                               "layers keep their activations", cfg.parallel.recompute),
                   "set parallel.recompute = \"none\" (or lower train.micro_batch to save memory)");
  }
}

// GPT-2's BPE reads two files, named by data.vocab_file and data.merge_file; a SentencePiece model
// reads neither, so they are errors with it (they would be ignored).
void check_tokenizer(const Config& cfg) {
  const DataConfig& d = cfg.data;
  if (d.tokenizer == kGpt2BpeTokenizer && (d.vocab_file.empty() || d.merge_file.empty()))
    inconsistent(latest(cfg, {"data.tokenizer", "data.vocab_file", "data.merge_file"}),
                 fmt::format("data.tokenizer = \"{}\" needs data.vocab_file and data.merge_file", kGpt2BpeTokenizer),
                 "set data.vocab_file = \"encoder.json\" and data.merge_file = \"vocab.bpe\" (GPT-2's files, "
                 "Megatron's vocab.json / merges.txt; data/fetch-gpt2-bpe.sh DIR fetches them)");
  if (d.tokenizer != kGpt2BpeTokenizer && (!d.vocab_file.empty() || !d.merge_file.empty()))
    inconsistent(latest(cfg, {"data.vocab_file", "data.merge_file", "data.tokenizer"}),
                 fmt::format("data.vocab_file / data.merge_file are GPT-2 BPE's files, but data.tokenizer = \"{}\"",
                             d.tokenizer),
                 fmt::format("set data.tokenizer = \"{}\", or drop data.vocab_file and data.merge_file",
                             kGpt2BpeTokenizer));
}

// The schedule kind's options (from the pipeline registry's traits: one list of kinds for config,
// planner and registry) and the layout keys that depend on the model.
void check_schedule_options(const Config& cfg) {
  const auto& m = cfg.model;
  const auto& p = cfg.parallel;
  const pipeline::ScheduleTraits& kind = pipeline::schedule_traits(p.schedule);
  if (p.vp > 1 && !kind.interleaving)
    inconsistent(
        latest(cfg, {"parallel.vp", "parallel.schedule"}),
        fmt::format("parallel.vp = {} needs parallel.schedule = \"interleaved\", got \"{}\"", p.vp,
                    p.schedule),
        "virtual pipeline chunks only exist in the interleaved 1F1B schedule: set "
        "schedule = \"interleaved\" or vp = 1");
  if (p.vertical_sync && !kind.vertical_sync)
    inconsistent(latest(cfg, {"parallel.vertical_sync", "parallel.schedule"}),
                 fmt::format("parallel.vertical_sync = true needs parallel.schedule = \"pipedream\", got "
                             "\"{}\"", p.schedule),
                 "vertical sync is PipeDream's option for its weight stashing: set schedule = "
                 "\"pipedream\" or vertical_sync = false");
  // trace_steps only bounds a trace; changed alone it would silently do nothing. (At its default it
  // is fine: a resolved config lists every key.)
  if (cfg.run.trace_steps != RunConfig{}.trace_steps && !cfg.run.trace)
    inconsistent(latest(cfg, {"run.trace_steps", "run.trace"}),
                 fmt::format("run.trace_steps = {} is set but run.trace = false", cfg.run.trace_steps),
                 "set run.trace = true to record the timeline (<run.dir>/trace.json), or remove run.trace_steps");
  if (p.vp > 1 && p.pp == 1)
    inconsistent(latest(cfg, {"parallel.vp", "parallel.pp"}),
                 fmt::format("parallel.vp = {} needs pipeline parallelism, but parallel.pp = 1", p.vp),
                 "interleaving spreads each pipeline rank's layers over vp chunks: set pp >= 2, or "
                 "vp = 1");
  // The asynchronous kinds change the update rule (stale weights); with one stage there is no
  // pipeline to run them on, and silently training with the flush rule would be a lie.
  if (!kind.synchronous() && p.pp == 1)
    inconsistent(latest(cfg, {"parallel.schedule", "parallel.pp"}),
                 fmt::format("parallel.schedule = \"{}\" ({} updates) needs parallel.pp > 1", p.schedule,
                             pipeline::update_rule_name(kind.update)),
                 "set parallel.pp > 1, or use a flush schedule (e.g. \"1f1b\") with pp = 1");
  if (m.kind == ModelKind::GPT && m.n_head % p.tp != 0)
    inconsistent(latest(cfg, {"parallel.tp", "model.n_head"}),
                 fmt::format("parallel.tp = {} does not divide model.n_head = {}", p.tp, m.n_head),
                 "tensor parallelism splits the attention heads: use a tp that divides n_head");
}

// parallel.stages (explicit boundaries) or the GPT's even split.
void check_stages(const Config& cfg) {
  const auto& m = cfg.model;
  const auto& p = cfg.parallel;
  if (!p.stages.empty()) {
    // Explicit boundaries: their shape here; that they cover exactly the model's layers is checked
    // against the model when the layout is built (dist/layout.h).
    const std::string at = where(cfg, "parallel.stages");
    if (static_cast<int>(p.stages.size()) != p.pp * p.vp)
      inconsistent(latest(cfg, {"parallel.stages", "parallel.pp", "parallel.vp"}),
                   fmt::format("parallel.stages lists {} stages but parallel.pp × parallel.vp = {}",
                               p.stages.size(), p.pp * p.vp),
                   "give one [first, end) range of global layers per model stage, e.g. "
                   "stages = [[0, 5], [5, 12]] with pp = 2");
    int next = 0;
    for (size_t s = 0; s < p.stages.size(); ++s) {
      const std::vector<int>& r = p.stages[s];
      if (r.size() != 2 || r[0] != next || r[1] <= r[0])
        inconsistent(at,
                     fmt::format("parallel.stages: stage {} is [{}]; stages are [first, end) with "
                                 "first < end, each starting where the previous one ended (at {})",
                                 s, fmt::join(r, ", "), next),
                     "list the model stages in order from global layer 0, e.g. [[0, 5], [5, 12]] (a "
                     "GPT has n_layer + 2 global layers: the embedding, the blocks and the head)");
      next = r[1];
    }
  } else if (m.kind == ModelKind::GPT && m.n_layer % (p.pp * p.vp) != 0) {
    // The GPT's default split (Megatron's): the blocks evenly over the model stages.
    inconsistent(
        latest(cfg, {"model.n_layer", "parallel.pp", "parallel.vp"}),
        fmt::format("model.n_layer = {} does not split evenly into parallel.pp × parallel.vp = {} × {} "
                    "= {} pipeline model stages", m.n_layer, p.pp, p.vp, p.pp * p.vp),
        "Megatron's split gives every model stage the same number of transformer blocks: use an "
        "n_layer that is a multiple of pp × vp, change pp / vp, or give the boundaries yourself "
        "(parallel.stages)");
  }
}

// The ranks of one pipeline: pp, or Σ replicas with replicated stages (1F1B-RR, PipeDream §3.2).
int64_t pipeline_ranks(const Config& cfg, int world_size) {
  const auto& p = cfg.parallel;
  if (p.replicas.empty()) return p.pp;
  if (!pipeline::schedule_traits(p.schedule).replicas)
    inconsistent(latest(cfg, {"parallel.replicas", "parallel.schedule"}),
                 fmt::format("parallel.replicas needs parallel.schedule = \"pipedream\", got \"{}\"",
                             p.schedule),
                 "replicated stages are PipeDream's 1F1B-RR: set schedule = \"pipedream\" or "
                 "replicas = []");
  if (static_cast<int>(p.replicas.size()) != p.pp)
    inconsistent(latest(cfg, {"parallel.replicas", "parallel.pp"}),
                 fmt::format("parallel.replicas lists {} stages but parallel.pp = {}",
                             p.replicas.size(), p.pp),
                 "give one replica count per pipeline stage, e.g. replicas = [2, 1, 1, 2] with pp = 4");
  int64_t ranks = 0;
  for (int r : p.replicas) {
    if (r < 1)
      inconsistent(where(cfg, "parallel.replicas"),
                   fmt::format("parallel.replicas has a count of {}", r),
                   "every stage needs at least one rank: use counts >= 1");
    ranks += r;
  }
  if (p.replicas.front() != p.replicas.back())
    inconsistent(where(cfg, "parallel.replicas"),
                 fmt::format("parallel.replicas gives the first stage {} replicas and the last {}",
                             p.replicas.front(), p.replicas.back()),
                 "the tied token embedding is updated on the first and the last stage together: "
                 "give both the same number of replicas");
  if (p.tp != 1 || world_size != ranks)
    inconsistent(latest(cfg, {"parallel.replicas", "parallel.tp"}),
                 fmt::format("parallel.replicas needs tp = 1 and exactly Σ replicas = {} ranks "
                             "(tp = {}, {} ranks)", ranks, p.tp, world_size),
                 fmt::format("replicas are PipeDream's data parallelism per stage: launch {} ranks "
                             "with tp = 1", ranks));
  return ranks;
}

// The data-parallel degree from the world size (one slice of each global batch per VW under
// virtual workers).
void set_data_parallel(Config& cfg, int world_size, int64_t pipeline_ranks) {
  const auto& p = cfg.parallel;
  const int64_t model_ranks = int64_t{p.tp} * pipeline_ranks;
  if (world_size % model_ranks != 0)
    inconsistent(
        latest(cfg, {"parallel.tp", "parallel.pp"}),
        fmt::format(
            "the world size {} is not a multiple of parallel.tp × parallel.pp = {} × {} = {}",
            world_size, p.tp, p.pp, model_ranks),
        fmt::format("run on a multiple of {} ranks ({}, {}, {}, ...), or change tp / pp",
                    model_ranks, model_ranks, 2 * model_ranks, 3 * model_ranks));
  cfg.dp = static_cast<int>(world_size / model_ranks);
  // Virtual workers split each global batch like data-parallel groups, one slice per VW (whatever
  // its number of stages: train/hetero/virtual_worker_sync.h).
  if (trains_virtual_workers(cfg.hetero) && !cfg.hetero.virtual_workers.empty())
    cfg.dp = static_cast<int>(cfg.hetero.virtual_workers.size());
  // VWs still to come from hetero.cluster (`baton train` derives them and validates again).
  if (!cfg.hetero.cluster.empty() && cfg.hetero.virtual_workers.empty()) cfg.dp = 1;
}

// The global batch divides into micro-batches over dp, and the schedule's own rules for that many
// micro-batches per step.
void check_batch(const Config& cfg, int world_size) {
  const auto& p = cfg.parallel;
  const pipeline::ScheduleTraits& kind = pipeline::schedule_traits(p.schedule);
  const auto& t = cfg.train;
  const int64_t per_step = int64_t{t.micro_batch} * cfg.dp;
  if (t.global_batch % per_step != 0) {
    const bool batch_set =
        cfg.origins.count("train.global_batch") || cfg.origins.count("train.micro_batch");
    const std::string at = batch_set ? latest(cfg, {"train.global_batch", "train.micro_batch"})
                                     : latest(cfg, {"parallel.tp", "parallel.pp"});
    const int64_t up = (t.global_batch / per_step + 1) * per_step;
    inconsistent(
        at,
        fmt::format("train.global_batch = {} is not a multiple of train.micro_batch × dp = "
                    "{} × {} = {}",
                    t.global_batch, t.micro_batch, cfg.dp, per_step),
        fmt::format("dp = world size {} / (tp {} × pp {}); use global_batch = {}{}, or "
                    "change micro_batch",
                    world_size, p.tp, p.pp, up,
                    t.global_batch > per_step
                        ? fmt::format(" or {}", t.global_batch / per_step * per_step)
                        : ""));
  }
  // The schedule's own rules for this many micro-batches per step (interleaving in groups of pp,
  // 2BW's m >= pp, micro-batches over replicas, ...): check_spec's, named at the keys that set
  // them.
  if (kind.generated) {
    const pipeline::ScheduleSpec spec{.kind = p.schedule, .pp = p.pp, .vp = p.vp,
                                      .microbatches = static_cast<int>(t.global_batch / per_step),
                                      .replicas = p.replicas, .vertical_sync = p.vertical_sync};
    try {
      pipeline::check_spec(spec);
    } catch (const Error& e) {
      inconsistent(latest(cfg, {"train.global_batch", "train.micro_batch", "parallel.pp",
                                "parallel.schedule", "parallel.replicas"}),
                   fmt::format("{} (micro-batches per step = train.global_batch / (train.micro_batch "
                               "× dp) = {} / ({} × {}) = {})", e.what(), t.global_batch, t.micro_batch,
                               cfg.dp, spec.microbatches),
                   fmt::format("{}; change train.global_batch or train.micro_batch accordingly", e.hint()));
    }
  }
}

}  // namespace

void validate(Config& cfg, int world_size) {
  BATON_ASSERT(world_size >= 1, "world_size {} < 1", world_size);
  for (const KeyDesc& key : config_detail::config_keys()) check_key(cfg, key);
  check_model(cfg);
  check_precision(cfg);
  check_optimizer(cfg);
  check_model_kind_keys(cfg);
  check_tokenizer(cfg);
  check_schedule_options(cfg);
  check_stages(cfg);
  set_data_parallel(cfg, world_size, pipeline_ranks(cfg, world_size));
  check_batch(cfg, world_size);
}

}  // namespace baton
