// The key table (DESIGN §6) and the small helpers every use of it shares: lookup, suggestions for
// misspelled names, and TOML formatting of values. The table is the single source of truth for
// which keys exist, their types (through the accessor), ranges and allowed values.
#include "config/config_keys.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "pipeline/schedules.h"

namespace baton::config_detail {
namespace {

// The pipeline registry's kinds (pipeline/schedules.h): one list for config, planner and registry.
std::vector<std::string_view> schedule_names() {
  std::vector<std::string_view> out;
  for (const pipeline::ScheduleTraits& t : pipeline::schedule_registry()) out.push_back(t.name);
  return out;
}

constexpr Range at_least(double lo) { return Range{.lo = lo}; }
constexpr Range above(double lo) { return Range{.lo = lo, .lo_open = true}; }
// [0, 1): probabilities and Adam's betas.
constexpr Range unit_interval() { return Range{.lo = 0, .hi = 1, .hi_open = true}; }

// An accessor for cfg.SEC.NAME, and a table row for it (designated initializers for the rest).
// clang-format off
#define BATON_FIELD(sec_, key_) +[](Config& c) -> auto& { return c.sec_.key_; }
// clang-format on
#define BATON_KEY(sec_, key_, doc_text, ...)                                            \
  KeyDesc {                                                                             \
    .section = #sec_, .name = #key_, .field = BATON_FIELD(sec_, key_), .doc = doc_text, \
    __VA_ARGS__                                                                         \
  }

// Rows name only the fields they set; the rest keep their defaults (GCC warns about that anyway).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// clang-format off
std::vector<KeyDesc> make_table() {
  return {
      BATON_KEY(model, kind, "model family", .allowed = {"gpt", "resnet", "vgg"}),
      BATON_KEY(model, n_layer, "number of layers", .range = at_least(1)),
      BATON_KEY(model, n_head, "attention heads", .range = at_least(1)),
      BATON_KEY(model, d_model, "hidden size", .range = at_least(1)),
      BATON_KEY(model, seq_len, "tokens per sequence", .range = at_least(1)),
      BATON_KEY(model, vocab_size, "vocabulary size (0 = from the tokenizer)", .range = at_least(0)),
      BATON_KEY(model, dropout, "dropout probability", .range = unit_interval()),
      BATON_KEY(model, image_size, "CNN input image side in pixels (vgg, resnet; n_layer picks the "
                "depth: VGG-11/13/16/19, ResNet-18/34/50/101/152)", .range = at_least(8)),
      BATON_KEY(model, in_channels, "CNN input image channels", .range = at_least(1)),
      BATON_KEY(model, classes, "CNN output classes", .range = at_least(2)),
      BATON_KEY(model, width, "CNN channel width multiplier", .range = above(0)),
      BATON_KEY(model, batch_norm, "VGG with batch normalization (ResNets always have it)"),
      BATON_KEY(model, init_from, "GPT: start (when no checkpoint is resumed) from these weights: "
                "\"hf:DIR\" = a Hugging Face GPT-2 directory (model.safetensors + config.json)"),

      BATON_KEY(data, train, "training dataset prefix (PREFIX.bin + PREFIX.idx)"),
      BATON_KEY(data, valid, "validation dataset prefix (optional)"),
      BATON_KEY(data, tokenizer, "SentencePiece .model file, or \"gpt2-bpe\" (GPT-2's BPE: vocab_file, merge_file)"),
      BATON_KEY(data, vocab_file, "tokenizer = \"gpt2-bpe\": GPT-2's encoder.json (Megatron's vocab.json)"),
      BATON_KEY(data, merge_file, "tokenizer = \"gpt2-bpe\": GPT-2's vocab.bpe (Megatron's merges.txt)"),
      BATON_KEY(data, train_labels, "image datasets: the training labels (IDX file)"),
      BATON_KEY(data, valid_labels, "image datasets: the validation labels (IDX file)"),
      BATON_KEY(data, synthetic, "CNNs: synthetic ImageNet-shaped images (no dataset)"),
      BATON_KEY(data, augment, "image augmentation", .allowed = {"none", "crop_flip"}),
      BATON_KEY(data, normalize, "per-channel normalisation from the training images (IDX datasets)"),
      BATON_KEY(data, format, "CNN dataset format: IDX files + labels, or folders root/<class>/*.jpg",
                .allowed = {"idx", "image_folder"}),
      BATON_KEY(data, mean, "image_folder: per-channel mean of the normalisation (empty: x/255)"),
      BATON_KEY(data, std, "image_folder: per-channel standard deviation of the normalisation"),
      BATON_KEY(data, eval_resize, "image_folder: validation resize of the shorter side before the "
                "centre crop (0 = image_size·256/224)", .range = at_least(0)),

      BATON_KEY(train, steps, "optimizer steps (0: no step, the starting weights are saved as checkpoint step 0)",
                .range = at_least(0)),
      BATON_KEY(train, global_batch, "sequences per optimizer step over all data-parallel ranks",
                .range = at_least(1)),
      BATON_KEY(train, micro_batch, "sequences per forward/backward", .range = at_least(1)),
      BATON_KEY(train, seed, "random seed"),
      BATON_KEY(train, log_every, "steps between log lines", .range = at_least(1)),
      BATON_KEY(train, eval_every, "steps between evaluations (0 = never)", .range = at_least(0)),
      BATON_KEY(train, eval_steps, "validation batches per evaluation", .range = at_least(1)),
      BATON_KEY(train, spike_factor, "a loss above this times the median of recent steps is a spike (0 = off)",
                .range = at_least(0)),
      BATON_KEY(train, spike_window, "steps in the loss-spike and gradient-norm medians", .range = at_least(1)),
      BATON_KEY(train, spike_ceiling,
                "a loss above this times max(a uniform guess's loss, the first step's loss) is divergence (0 = off)",
                .range = at_least(0)),
      BATON_KEY(train, spike_norm_factor,
                "a gradient norm above this times the median of recent norms is a spike (0 = off)",
                .range = at_least(0)),
      BATON_KEY(train, on_spike,
                "what a spike does: stop, or rewind to the last good checkpoint and skip the spike window's data",
                .allowed = {"stop", "rewind"}),
      BATON_KEY(train, max_rewinds, "rewinds in one run before a spike stops it", .range = at_least(0)),

      BATON_KEY(optim, kind, "optimizer", .allowed = {"adamw", "sgd"}),
      BATON_KEY(optim, lr, "peak learning rate", .range = above(0)),
      BATON_KEY(optim, min_lr, "final learning rate of the decay", .range = at_least(0)),
      BATON_KEY(optim, warmup_steps, "linear warm-up steps", .range = at_least(0)),
      BATON_KEY(optim, decay, "learning-rate decay after warm-up",
                .allowed = {"cosine", "linear", "constant", "step"}),
      BATON_KEY(optim, step_size, "decay = \"step\": steps between LR drops", .range = at_least(0)),
      BATON_KEY(optim, step_gamma, "decay = \"step\": factor of each LR drop", .range = above(0)),
      BATON_KEY(optim, weight_decay, "decoupled weight decay", .range = at_least(0)),
      BATON_KEY(optim, beta1, "Adam first-moment decay", .range = unit_interval()),
      BATON_KEY(optim, beta2, "Adam second-moment decay", .range = unit_interval()),
      BATON_KEY(optim, eps, "Adam epsilon", .range = above(0)),
      BATON_KEY(optim, momentum, "SGD momentum", .range = unit_interval()),
      BATON_KEY(optim, nesterov, "SGD with Nesterov momentum"),
      BATON_KEY(optim, weight_decay_mode, "weight decay: decoupled from the gradient, or L2 added to it",
                .allowed = {"decoupled", "l2"}),
      BATON_KEY(optim, decay_norm_and_bias, "apply weight decay to norm parameters and biases too"),
      BATON_KEY(optim, grad_clip, "global gradient-norm clip (0 = none)", .range = at_least(0)),

      BATON_KEY(parallel, tp, "tensor-parallel size", .range = at_least(1)),
      BATON_KEY(parallel, pp, "pipeline-parallel stages", .range = at_least(1)),
      BATON_KEY(parallel, vp, "virtual pipeline chunks per stage", .range = at_least(1)),
      BATON_KEY(parallel, schedule, "pipeline schedule",
                .allowed = schedule_names()),
      BATON_KEY(parallel, sequence_parallel, "shard layer-norm/dropout activations over tp"),
      BATON_KEY(parallel, zero1, "shard optimizer state over data-parallel ranks"),
      BATON_KEY(parallel, recompute, "activation recomputation",
                .allowed = {"none", "selective", "full"}),
      BATON_KEY(parallel, scatter_gather, "split inter-stage activations over tp ranks"),
      BATON_KEY(parallel, vertical_sync, "pipedream: every stage uses the input stage's weight version"),
      BATON_KEY(parallel, replicas, "pipedream (1F1B-RR): ranks per pipeline stage, e.g. [2, 1, 1, 2] "
                "(empty = one each)"),
      BATON_KEY(parallel, stages, "pipeline stage boundaries: [first, end) global layers per model "
                "stage, pp x vp of them, e.g. [[0, 5], [5, 12]] (empty = the model's even split)"),
      BATON_KEY(parallel, bucket_mb, "data-parallel gradient bucket size in MiB",
                .range = above(0)),

      BATON_KEY(precision, device, "where to run", .allowed = {"auto", "cpu", "cuda"}),
      BATON_KEY(precision, compute, "compute precision", .allowed = {"fp32", "bf16"}),
      BATON_KEY(precision, attention, "GPU attention kernel: \"auto\" (the backend's default, today baton's "
                "flash kernel), \"flash\" (baton's), \"cudnn\" (cuDNN's fused flash attention); "
                "\"flash\" and \"cudnn\" need a GPT in bf16 on the GPU",
                .allowed = {"auto", "flash", "cudnn"}),

      BATON_KEY(checkpoint, dir, "checkpoint directory (empty = <run.dir>/ckpt)"),
      BATON_KEY(checkpoint, every, "steps between checkpoints (0 = only at the end)",
                .range = at_least(0)),
      BATON_KEY(checkpoint, keep, "checkpoints kept", .range = at_least(1)),
      BATON_KEY(checkpoint, resume, "\"auto\" (newest complete), \"never\", or a checkpoint path",
                .non_empty = true),

      BATON_KEY(run, dir, "run directory (metrics, resolved config, checkpoints)", .non_empty = true),
      BATON_KEY(run, stall_timeout_s,
                "end a job that makes no progress for this long, naming the stuck rank (0 = off)",
                .range = at_least(0)),
      BATON_KEY(run, trace, "write <run.dir>/trace.json: every rank's executed instructions with wall-clock "
                "times beside the simulator's prediction (Chrome trace; open in ui.perfetto.dev)"),
      BATON_KEY(run, trace_steps, "steps run.trace records, from the run's first (0 = every step)",
                .range = at_least(0)),
      BATON_KEY(run, tensorboard, "also write metrics.jsonl's records as TensorBoard scalars: "
                "<run.dir>/events.out.tfevents.* (virtual workers: <run.dir>/vw<k>/); tensorboard --logdir <run.dir>"),

      BATON_KEY(hetero, sync, "synchronization between virtual workers (allreduce trains virtual workers "
                "only when virtual_workers or nm > 1 is set; else it is the plain homogeneous layout)",
                .allowed = {"allreduce", "wsp"}),
      BATON_KEY(hetero, staleness, "WSP clock distance bound D", .range = at_least(0)),
      BATON_KEY(hetero, cluster, "cluster description file"),
      BATON_KEY(hetero, policy, "how hetero.cluster's devices are grouped into virtual workers "
                "(HetPipe §8.1, Table 3: np, ed, hd; empty = the virtual workers are given)", .allowed = {"", "np", "ed", "hd"}),
      BATON_KEY(hetero, placement, "parameter-server placement: default (tensors round robin over the "
                "shards) or local (on the rank of the stage that owns them, ED-local)",
                .allowed = {"default", "local"}),
      BATON_KEY(hetero, virtual_workers, "virtual workers: one entry per VW listing its stages in order, "
                "each RANK[@DEVICE][:FIRST-END], e.g. [\"0\", \"1,2\"] or [\"0@V100:0-7, 1@P100:7-12\"] "
                "(empty = one VW per rank)"),
      BATON_KEY(hetero, nm, "minibatches per wave (Nm) of WSP and allreduce virtual workers",
                .range = at_least(1)),
      BATON_KEY(hetero, jitter, "stretch each rank's compute by a seeded random factor in [1, 1 + jitter] "
                "per minibatch (emulated variability; 0 = off)", .range = at_least(0)),
      BATON_KEY(hetero, jitter_span, "minibatches each jitter factor lasts (1 = a new draw per minibatch; "
                "larger = straggler episodes, e.g. hetero.nm for one factor per wave)", .range = at_least(1)),
      BATON_KEY(hetero, jitter_scope, "whose compute a jitter draw slows: rank (each rank its own factors) or "
                "vw (every stage of a virtual worker the VW's factors: the VW straggles as a whole)",
                .allowed = {"rank", "vw"}),
      BATON_KEY(hetero, jitter_probability, "share of jitter episodes that straggle: each draws a factor in "
                "[1, 1 + jitter] with this probability, else runs at full speed (1 = every episode)",
                .range = Range{.lo = 0, .hi = 1, .lo_open = true}),
      BATON_KEY(hetero, slowdown, "per rank: stretch its compute by this factor (>= 1), e.g. [1, 3] (empty = "
                "from the devices named in virtual_workers, relative to the fastest; none named = 1)",
                .range = at_least(1)),
      BATON_KEY(hetero, memory_limit, "per rank: GiB its backend may allocate (0 = unlimited; empty = the "
                "memory of the device named in virtual_workers, none named = unlimited)", .range = at_least(0)),
      BATON_KEY(hetero, deterministic, "WSP test mode: the server accesses of the virtual workers' first stages "
                "(pulls before a forward, pushes after an update) take turns in a seeded order, so the run is "
                "reproducible bit for bit (any stage counts; hetero.placement = \"default\")"),
      BATON_KEY(hetero, overlap, "WSP: push and pull on a communication thread that overlaps compute (MPI is "
                "then initialised with MPI_THREAD_MULTIPLE); false: on the training thread, between minibatches "
                "(deterministic mode always is)"),
  };
}

// clang-format on
#pragma GCC diagnostic pop
#undef BATON_KEY
#undef BATON_FIELD

// A candidate counts as a likely misspelling when it is within about a third of its length.
bool is_close(std::string_view typed, std::string_view candidate) {
  const int d = edit_distance(typed, candidate);
  return d <= std::max<int>(1, static_cast<int>(std::min(typed.size(), candidate.size())) / 3);
}

template <typename Range_>
std::string_view closest(std::string_view typed, const Range_& candidates) {
  std::string_view best;
  int best_d = std::numeric_limits<int>::max();
  for (std::string_view c : candidates) {
    const int d = edit_distance(typed, c);
    if (d < best_d && is_close(typed, c)) best = c, best_d = d;
  }
  return best;
}

template <typename Range_>
std::string quoted_list(const Range_& items, std::string_view quote) {
  std::string out;
  for (std::string_view s : items) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{}{}{}", quote, s, quote);
  }
  return out;
}

std::string trim_number(double v) {
  return v == std::floor(v) && std::abs(v) < 1e15 ? fmt::format("{}", static_cast<int64_t>(v))
                                                  : fmt::format("{}", v);
}

}  // namespace

bool Range::contains(double v) const {
  const bool lo_ok = lo_open ? v > lo : v >= lo;
  const bool hi_ok = hi_open ? v < hi : v <= hi;
  return lo_ok && hi_ok;
}

std::string Range::describe() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi)
    return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", trim_number(lo), trim_number(hi),
                       hi_open ? ")" : "]");
  if (has_lo) return fmt::format("{} {}", lo_open ? ">" : ">=", trim_number(lo));
  if (has_hi) return fmt::format("{} {}", hi_open ? "<" : "<=", trim_number(hi));
  return "";
}

std::string KeyDesc::full_name() const { return fmt::format("{}.{}", section, name); }

const std::vector<KeyDesc>& config_keys() {
  static const std::vector<KeyDesc> table = make_table();
  return table;
}

const std::vector<std::string_view>& config_sections() {
  static const std::vector<std::string_view> sections = [] {
    std::vector<std::string_view> out;
    for (const KeyDesc& k : config_keys())
      if (out.empty() || out.back() != k.section) out.push_back(k.section);
    return out;
  }();
  return sections;
}

const KeyDesc* find_key(std::string_view section, std::string_view name) {
  for (const KeyDesc& k : config_keys())
    if (k.section == section && k.name == name) return &k;
  return nullptr;
}

bool is_section(std::string_view section) {
  const auto& s = config_sections();
  return std::find(s.begin(), s.end(), section) != s.end();
}

std::string suggest_key(std::string_view section, std::string_view name) {
  std::vector<std::string_view> in_section;
  for (const KeyDesc& k : config_keys())
    if (k.section == section) in_section.push_back(k.name);
  if (auto best = closest(name, in_section); !best.empty())
    return fmt::format("did you mean '{}.{}'?", section, best);
  // The right name in the wrong section ("lr" under [train]).
  for (const KeyDesc& k : config_keys())
    if (k.name == name)
      return fmt::format("'{}' belongs in [{}]: did you mean '{}'?", name, k.section,
                         k.full_name());
  if (in_section.empty()) return suggest_section(section);
  return fmt::format("[{}] has the keys {}", section, quoted_list(in_section, ""));
}

std::string suggest_section(std::string_view section) {
  if (auto best = closest(section, config_sections()); !best.empty())
    return fmt::format("did you mean [{}]?", best);
  return fmt::format("the sections are {}", quoted_list(config_sections(), ""));
}

std::string suggest_value(const KeyDesc& key, std::string_view value) {
  std::string hint = fmt::format("{} ({}) must be one of {}", key.full_name(), key.doc,
                                 quoted_list(key.allowed, "\""));
  if (auto best = closest(value, key.allowed); !best.empty())
    hint += fmt::format("; did you mean \"{}\"?", best);
  return hint;
}

std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f)
          out += fmt::format("\\u{:04X}", static_cast<unsigned>(c));
        else
          out += ch;  // UTF-8 bytes pass through; TOML files are UTF-8
    }
  }
  return out + "\"";
}

std::string toml_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // fmt's "{}" is the shortest text that reads back to the same double; TOML needs a '.' or an
  // exponent to read it as a float rather than an integer.
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string format_field(const KeyDesc& key, const Config& cfg) {
  // Accessors take Config& so one table serves reads and writes; this read does not modify.
  Config& c = const_cast<Config&>(cfg);
  return std::visit(
      [&](auto get) -> std::string {
        const auto& v = get(c);
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>)
          return toml_float(v);
        else if constexpr (std::is_same_v<T, bool>)
          return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          return toml_string(v);
        else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_string(v[i]);
          return out + "]";
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          return fmt::format("[{}]", fmt::join(v, ", "));
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_float(v[i]);
          return out + "]";
        } else if constexpr (std::is_same_v<T, std::vector<std::vector<int>>>) {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) out += fmt::format("{}[{}]", i ? ", " : "", fmt::join(v[i], ", "));
          return out + "]";
        } else if constexpr (std::is_enum_v<T>) {
          return toml_string(key.allowed.at(static_cast<size_t>(v)));
        } else
          return fmt::format("{}", v);
      },
      key.field);
}

bool is_text_key(const KeyDesc& key) {
  return std::visit(
      [](auto get) {
        using T = std::decay_t<decltype(get(std::declval<Config&>()))>;
        return std::is_same_v<T, std::string> || std::is_enum_v<T>;
      },
      key.field);
}

}  // namespace baton::config_detail

namespace baton {
namespace {
template <typename E>
std::string_view enum_name(std::string_view section, std::string_view name, E value) {
  return config_detail::find_key(section, name)->allowed.at(static_cast<size_t>(value));
}
}  // namespace

std::string_view to_string(ModelKind kind) { return enum_name("model", "kind", kind); }
std::string_view to_string(SyncMode sync) { return enum_name("hetero", "sync", sync); }
std::string_view to_string(Placement placement) { return enum_name("hetero", "placement", placement); }

std::optional<ModelKind> model_kind_named(std::string_view name) {
  const std::vector<std::string_view>& names = config_detail::find_key("model", "kind")->allowed;
  const auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) return std::nullopt;
  return static_cast<ModelKind>(it - names.begin());
}

}  // namespace baton

namespace baton::config_detail {

int edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus adjacent transpositions ("modle" -> "model" is 1).
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      d[i][j] =
          std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

}  // namespace baton::config_detail
