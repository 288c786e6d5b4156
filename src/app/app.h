// Subcommands of the baton executable. main.cpp parses argv (CLI11) and calls one of these; each
// returns the process exit code and throws baton::Error for user errors.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace baton {
struct Config;
namespace dist {
class Comm;
}
}  // namespace baton

namespace baton::app {

// Starts MPI, loads and validates CONFIG (with overrides) for the world size on every rank (a bad
// config is reported once, by rank 0), runs `body` on every rank under dist::run_guarded and
// finalizes MPI; returns the exit code. `baton train` and `baton bench` run inside it.
int run_with_config(const std::string& config, const std::vector<std::string>& overrides,
                    bool log_all_ranks, const std::function<int(const Config&, dist::Comm&)>& body);

struct TrainOptions {
  std::string config;
  std::vector<std::string> overrides;  // "section.key=value"
  bool log_all_ranks = false;          // every rank prints its log lines (default: rank 0 only)
};
int run_train(const TrainOptions& opts);

// `baton bench CONFIG [--set k=v]... [--warmup N] [--steps N]`: the training session of CONFIG on
// synthetic tokens (no dataset, no checkpoints, no evaluation, no files written); prints
// tokens/s, TFLOP/s per device, MFU (when the peak is known), median and min step time and, with
// several ranks, the share of time blocked in communication (DESIGN §8).
struct BenchOptions {
  std::string config;
  std::vector<std::string> overrides;  // "section.key=value"
  int warmup = 3;                      // untimed steps first
  int steps = 10;                      // timed steps
  std::string json;                    // also write the results here (rank 0), "" = no file
};
int run_bench(const BenchOptions& opts);

// `baton eval CONFIG --checkpoint PATH`: validation loss (and a CNN's top-1 / top-5) of a
// checkpoint under the config's layout; `batches` = 0: the whole validation set in whole batches.
struct EvalOptions {
  std::string config;
  std::string checkpoint;              // a checkpoint file, or a directory (its newest)
  std::vector<std::string> overrides;  // "section.key=value"
  int batches = 0;
  std::string json;  // also write the results here (rank 0), "" = no file
};
int run_eval(const EvalOptions& opts);

struct GenerateOptions {
  std::string checkpoint;  // a weights file, or a directory holding them
  std::string prompt;
  std::string tokenizer;   // optional; default: the one named in the checkpoint's config
  std::string vocab_file;  // gpt2-bpe: override the checkpoint config's data.vocab_file
  std::string merge_file;  // gpt2-bpe: override the checkpoint config's data.merge_file
  int tokens = 64;
  double temperature = 0.8;
  int top_k = 40;
  uint64_t seed = 1;
  std::string logits;      // also write the prompt's logits here (JSON), "" = no file
};
int run_generate(const GenerateOptions& opts);

// `baton ckpt inspect|verify PATH`: PATH is a checkpoint file or directory (its newest).
struct CkptOptions {
  std::string path;
  bool show_config = false;  // inspect: also print the stored config
};
int run_ckpt_inspect(const CkptOptions& opts);
int run_ckpt_verify(const CkptOptions& opts);
// `baton ckpt export PATH --format hf OUT`: a GPT checkpoint (any layout wrote it) as a Hugging
// Face GPT-2 directory, OUT/model.safetensors + OUT/config.json (train/checkpoint/hf_gpt2.h).
struct CkptExportOptions {
  std::string path;       // a checkpoint file, or a directory (its newest)
  std::string format = "hf";
  std::string out;        // the output directory (created)
  std::string tokenizer;  // the vocabulary's tokenizer when the stored config's is elsewhere now
};
int run_ckpt_export(const CkptExportOptions& opts);
// Hidden `baton ckpt bench`: save/load throughput of a GPT's full training state (not a test).
struct CkptBenchOptions {
  std::string dir = "ckpt-bench";
  int n_layer = 12, n_head = 12, d_model = 768, seq_len = 1024, vocab = 50257;
  int repeats = 3;
};
int run_ckpt_bench(const CkptBenchOptions& opts);

// `baton schedule`: print / simulate / trace a pipeline schedule (docs/schedules.md).
struct ScheduleOptions {
  std::string kind = "1f1b";
  int pp = 1, vp = 1, microbatches = 1, steps = 1;
  std::string costs = "1,2";   // F,B[,W] per microbatch per rank
  double send = 0;             // latency of one point-to-point message
  std::string replicas;        // pipedream: workers per stage, e.g. "2,1"
  bool vertical_sync = false;  // pipedream
  bool lowered = false;        // grid: print the lowered program (sends, receives, updates)
  std::string format = "grid"; // grid | json | trace
  std::string output;          // file instead of stdout
};
int run_schedule(const ScheduleOptions& opts);

// `baton plan CONFIG --cluster FILE`: PTD-P layout search / --evaluate (docs/planner.md).
struct PlanOptions {
  std::string config;
  std::vector<std::string> overrides;  // "section.key=value"
  std::string cluster;                 // configs/clusters/*.toml
  int gpus = 0;                        // use the cluster's first N GPUs (0 = all)
  int top_k = 5;
  bool evaluate = false;               // predict the config's own layout, no search
  std::string format = "table";        // table | json
  std::string output;                  // also write the best layout's TOML snippet here
  std::string algorithm = "ptdp";      // ptdp | pipedream | hetpipe | madpipe
  std::string profile;                 // measured profile (`baton profile --out`), "" = analytical
  std::string policy;                  // hetpipe: np | ed | hd ("" = hd)
  int nm = 0;                          // hetpipe: concurrent minibatches (0 = the smallest Max_m)
  double gpu_memory_gb = 0;            // hetpipe: every GPU's memory for the partition (0 = the device's
                                       // less the cost model's overhead)
  int vw_size = 0;                     // hetpipe: GPUs per virtual worker (0 = GPUs of node 0)
  std::string schedules;               // ptdp search: kinds, comma-separated ("" = the synchronous ones)
  std::string recompute;               // ptdp search: subset of none,selective,full ("" = all)
};
int run_plan(const PlanOptions& opts);

// `baton profile CONFIG --out PROFILE.json`: per-layer forward/backward time and memory measured
// on this machine's device at the configured micro-batch (docs/planner.md).
struct ProfileOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string out;
  int warmup = 1, repeats = 3;
};
int run_profile(const ProfileOptions& opts);

struct DataBuildOptions {
  std::vector<std::string> inputs;  // plain-text files; a line `<|endoftext|>` or the file's end ends a document
  std::string output;               // dataset prefix: writes PREFIX.bin, PREFIX.idx
  int train_tokenizer = 0;          // > 0: train a BPE tokenizer of this vocabulary size
  std::string tokenizer;            // else: an existing SentencePiece .model, or "gpt2-bpe" with:
  std::string vocab_file;           //   GPT-2's encoder.json (Megatron's --vocab-file)
  std::string merge_file;           //   GPT-2's vocab.bpe (Megatron's --merge-file)
};
int run_data_build(const DataBuildOptions& opts);

// `baton data images`: one batch of a CNN's data source as raw float32 / int32 files (data_images.cpp).
struct DataImagesOptions {
  std::string config;
  std::vector<std::string> overrides;  // "section.key=value"
  std::string out;                     // FILE (images) and FILE.labels
  std::string split = "valid";         // "valid" | "train"
  int64_t batch = 0;                   // validation batch, or training step
  int rows = 0;                        // 0: train.global_batch
};
int run_data_images(const DataImagesOptions& opts);

// `baton --version`: version and build features.
std::string version_text();

}  // namespace baton::app
