// Typed configuration (DESIGN §6). TOML files are parsed with toml++ into these structs; every key
// has a default here. Errors name the key and `file:line` (or `--set` for command-line overrides):
// unknown keys, wrong types, out-of-range values and inconsistent combinations.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace baton {

// Keys with a fixed set of names are parsed once into these (the key table's `allowed` lists the
// names in enum order, config_keys.cpp); code compares the enums, and to_string() gives the name
// back for messages. Nothing outside src/config/ knows the names.
enum class ModelKind : uint8_t { GPT, RESNET, VGG };
enum class SyncMode : uint8_t { ALLREDUCE, WSP };
enum class Placement : uint8_t { DEFAULT, LOCAL };
std::string_view to_string(ModelKind kind);
std::string_view to_string(SyncMode sync);
std::string_view to_string(Placement placement);
// A model kind from its name (a profile file's "kind"); nullopt for an unknown name.
std::optional<ModelKind> model_kind_named(std::string_view name);

struct ModelConfig {
  ModelKind kind = ModelKind::GPT;
  int n_layer = 4;
  int n_head = 4;
  int d_model = 256;
  int seq_len = 128;
  int vocab_size = 0;  // 0 = from the tokenizer
  double dropout = 0.0;
  int image_size = 224;  // CNNs (vgg, resnet): input images are image_size × image_size pixels
  int in_channels = 3;   // CNNs: channels of an input image (1 for Fashion-MNIST)
  int classes = 1000;    // CNNs: output classes
  double width = 1.0;    // CNNs: channel width multiplier (small CPU runs: e.g. 0.25)
  bool batch_norm = true;  // VGG: with batch norm (torchvision's vgg*_bn); ResNets always have it
  // GPT: the weights a run starts from when it resumes no checkpoint; "hf:DIR" = a Hugging Face
  // GPT-2 directory (model.safetensors + config.json; docs/checkpoints.md). "" = random init.
  std::string init_from;

  bool operator==(const ModelConfig&) const = default;
};

// data.tokenizer (and `--tokenizer`) naming GPT-2's byte-level BPE instead of a SentencePiece model.
inline constexpr std::string_view kGpt2BpeTokenizer = "gpt2-bpe";

struct DataConfig {
  std::string train;      // dataset prefix (PREFIX.bin / PREFIX.idx)
  std::string valid;      // dataset prefix, optional
  std::string tokenizer;   // SentencePiece .model, or kGpt2BpeTokenizer
  std::string vocab_file;  // gpt2-bpe: GPT-2's encoder.json (Megatron's --vocab-file, vocab.json)
  std::string merge_file;  // gpt2-bpe: GPT-2's vocab.bpe (Megatron's --merge-file, merges.txt)
  // Image datasets (IDX, MNIST's format): data.train / data.valid name the image files, these their
  // labels.
  std::string train_labels;
  std::string valid_labels;
  bool synthetic = false;        // CNNs: ImageNet-shaped random images (baton bench / profile)
  std::string augment = "none";  // "none" | "crop_flip": deterministic random crop and flip
  bool normalize = true;         // per-channel mean/std normalisation from the training images
  // Image datasets: "idx" (IDX image + label files) or "image_folder" (data.train / data.valid are
  // folders root/<class>/*.jpg, classes in sorted order, decoded with libjpeg-turbo; docs/cnn.md).
  std::string format = "idx";
  // image_folder: per-channel normalisation (x/255 - mean_c)/std_c (torchvision's Normalize);
  // empty = x/255 (ToTensor only). One value per model.in_channels.
  std::vector<double> mean, std;
  // image_folder: validation Resize (shorter side, PIL bilinear with antialias) before the centre
  // crop to model.image_size; 0 = round(image_size · 256 / 224), the ImageNet recipe.
  int eval_resize = 0;

  bool operator==(const DataConfig&) const = default;
};

struct TrainConfig {
  int64_t steps = 1000;
  int global_batch = 32;  // sequences per optimizer step, over all data-parallel ranks
  int micro_batch = 8;    // sequences per forward/backward
  uint64_t seed = 1234;
  int log_every = 10;
  int eval_every = 100;  // 0 = never
  int eval_steps = 10;   // validation batches per evaluation
  // The divergence guard (train/observe/divergence_guard.h); each factor 0 = off.
  double spike_factor = 10;       // a loss above this × the median of recent steps
  int spike_window = 100;         // steps in that median
  double spike_ceiling = 2;       // a loss above this × max(uniform guess's loss, first loss)
  double spike_norm_factor = 0;   // a gradient norm above this × the median of recent norms (off: clipping absorbs many)
  std::string on_spike = "stop";  // "stop" | "rewind": reload the last good checkpoint, skip the window's data
  int max_rewinds = 3;            // rewinds in one run before a spike stops it

  bool operator==(const TrainConfig&) const = default;
};

struct OptimConfig {
  std::string kind = "adamw";  // "adamw" | "sgd"
  double lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 100;
  std::string decay = "cosine";  // "cosine" | "linear" | "constant" | "step"
  int64_t step_size = 0;         // decay = "step": the LR is multiplied by step_gamma every step_size steps
  double step_gamma = 0.1;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double momentum = 0.9;
  bool nesterov = false;                      // sgd: Nesterov momentum
  std::string weight_decay_mode = "decoupled";  // "decoupled" (AdamW, SGDW) | "l2" (added to the gradient)
  bool decay_norm_and_bias = false;           // decay norm gains/biases and biases too (default: not)
  double grad_clip = 1.0;  // 0 = no clipping

  bool operator==(const OptimConfig&) const = default;
};

struct ParallelConfig {
  int tp = 1;
  int pp = 1;
  int vp = 1;
  std::string schedule = "1f1b";
  bool sequence_parallel = false;
  bool zero1 = false;
  std::string recompute = "none";  // "none" | "selective" | "full"
  bool scatter_gather = false;
  bool vertical_sync = false;  // pipedream (PipeDream §3.3): all stages use the input stage's version
  // pipedream with replicated stages (1F1B-RR, PipeDream §3.2): ranks per pipeline stage (pp
  // entries; the pipeline then spans their sum of ranks, micro-batch k runs on replica k mod r_s of
  // stage s). Empty = one rank per stage.
  std::vector<int> replicas;
  // Explicit pipeline stage boundaries: pp·vp ranges [first, end) of the model's global layers, in
  // model-stage order (a GPT has n_layer + 2: embedding, blocks, head). Empty = the model's even
  // split (Megatron's for a GPT).
  std::vector<std::vector<int>> stages;
  double bucket_mb = 25.0;  // data-parallel gradients are reduced in buckets of this size

  bool operator==(const ParallelConfig&) const = default;
};

struct PrecisionConfig {
  std::string device = "auto";  // "auto" | "cpu" | "cuda"
  std::string compute = "fp32";  // "fp32" | "bf16"
  std::string attention = "auto";  // "auto" | "flash" | "cudnn" (backend/attention_kernel.h)

  bool operator==(const PrecisionConfig&) const = default;
};

struct CheckpointConfig {
  std::string dir;  // empty = <run.dir>/ckpt
  int64_t every = 0;  // 0 = only at the end
  int keep = 3;
  std::string resume = "auto";  // "auto" | "never" | path

  bool operator==(const CheckpointConfig&) const = default;
};

struct RunConfig {
  std::string dir = "runs/default";
  double stall_timeout_s = 1800;  // end a job with no progress for this long (train/observe/stall_watchdog.h); 0 = off
  bool trace = false;       // <dir>/trace.json: the measured timeline of every rank + the prediction
  int64_t trace_steps = 20;  // steps recorded from the run's first (0 = every step)
  bool tensorboard = false;  // events.out.tfevents.* beside the metrics file (train/observe/tensorboard.h)

  bool operator==(const RunConfig&) const = default;
};

struct HeteroConfig {
  SyncMode sync = SyncMode::ALLREDUCE;
  int staleness = 0;               // D
  std::string cluster;
  std::string policy;                // "" (VWs given) | "np" | "ed" | "hd": how hetero.cluster is split into VWs
  Placement placement = Placement::DEFAULT;  // tensors round robin over shards | ED-local
  // One entry per VW: its stages in order, RANK[@DEVICE][:FIRST-END] (config/virtual_workers.h);
  // empty = one VW per rank.
  std::vector<std::string> virtual_workers;
  int nm = 1;  // Nm, minibatches per wave (HetPipe §4-5)
  double jitter = 0;  // each rank's compute stretched by a seeded factor in [1, 1 + jitter] per minibatch
  // Minibatches one jitter factor lasts (1 = a new draw every minibatch; Nm = one per wave): a
  // straggler episode, the temporally correlated slowdowns of shared clusters.
  int jitter_span = 1;
  // Whose compute one jitter draw slows: "rank" (each rank its own factors: a device's own
  // variability) or "vw" (every stage of a VW the VW's factors: a straggler that slows a VW as a
  // whole — its input pipeline, its host, a node of its own under NP-style placement).
  std::string jitter_scope = "rank";
  // The share of episodes that straggle (1 = every episode draws a factor in [1, 1 + jitter]; q < 1:
  // an episode is slowed only with probability q, else runs at the rank's speed — occasional
  // stragglers rather than constant variation).
  double jitter_probability = 1;
  // Emulated devices on one machine (config/device_emulation.h), one entry per rank: its compute is
  // stretched by this factor (>= 1). Empty = from the devices named in virtual_workers (the fastest
  // named device's peak / the rank's device's peak), 1 where none is named.
  std::vector<double> slowdown;
  // GiB per rank its backend may allocate (0 = unlimited). Empty = the named device's memory, none
  // named = unlimited.
  std::vector<double> memory_limit;
  // WSP's deterministic mode (issues 13 and 23, train/hetero/wsp_turns.h): the server accesses of the VWs'
  // first stages take turns in a seeded order, so a run is reproducible bit for bit.
  bool deterministic = false;
  // WSP: pushes and pulls on a communication thread that overlaps compute (dist/server_client.h;
  // needs MPI_THREAD_MULTIPLE); false, or in deterministic mode, on the training thread.
  bool overlap = true;

  bool operator==(const HeteroConfig&) const = default;
};

// Where a key's value came from: `file:line` or `--set`. `order` ranks sources so that the one
// applied last wins (file keys by line, then --set overrides in command-line order).
struct KeyOrigin {
  std::string where;
  int64_t order = 0;
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimConfig optim;
  ParallelConfig parallel;
  PrecisionConfig precision;
  CheckpointConfig checkpoint;
  RunConfig run;
  HeteroConfig hetero;

  std::string source_path;  // the TOML file it came from ("" if built in code)
  // "section.key" -> where it was set; keys not listed kept their defaults. Filled by load_config*
  // so that validate() can name the line of an inconsistent value.
  std::map<std::string, KeyOrigin> origins;

  // Derived (valid after validate()):
  int dp = 1;  // data-parallel size = world / (tp * pp)
  int micro_batches_per_step() const { return global_batch_per_rank() / train.micro_batch; }
  int global_batch_per_rank() const { return train.global_batch / dp; }
  std::string checkpoint_dir() const { return checkpoint.dir.empty() ? run.dir + "/ckpt" : checkpoint.dir; }

  // The resolved config as TOML text (every key, defaults included); load_config_string() of it
  // gives back an equal Config.
  std::string to_toml() const;

  // Equal settings (the nine sections); source_path, origins and dp are bookkeeping and ignored.
  bool operator==(const Config& other) const;
};

// Parse `path`, apply `overrides` ("section.key=value", same validation; the value is parsed as a
// TOML value, and a bare word is taken as a string), and validate for `world_size` ranks.
// Throws baton::Error naming the key and file:line.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                   int world_size = 1);
// The file and overrides as parsed, not validated (nullopt on any error: load_config reports it).
// For the few decisions made before the world exists (MpiRuntime::init's thread level).
std::optional<Config> peek_config(const std::string& path, const std::vector<std::string>& overrides);
// Same from TOML text; `origin` names the source in errors.
Config load_config_string(const std::string& toml_text, const std::string& origin,
                          const std::vector<std::string>& overrides = {}, int world_size = 1);

// Checks ranges and combinations; called by load_config. Throws baton::Error.
void validate(Config& cfg, int world_size);

// What this build can train (`baton train`, `baton bench`): the model and optimizer kinds, the
// schedule's executability, and of [hetero] the virtual-worker layouts that run (WSP, or allreduce
// with VWs of one stage each: docs/hetpipe.md).
// Throws baton::Error (what + hint), the same on every rank.
void check_trainable(const Config& cfg);

// Writes cfg.to_toml() to `<dir>/config.toml` (creating dir). Returns the path.
std::string write_resolved_config(const Config& cfg, const std::string& dir);

}  // namespace baton
