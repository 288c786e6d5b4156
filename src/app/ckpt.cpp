// `baton ckpt export PATH --format hf OUT`: a GPT checkpoint as a Hugging Face GPT-2 directory.
// `baton ckpt inspect PATH`: a checkpoint's metadata and every tensor (name, shape, dtype,
// checksum). `baton ckpt verify PATH`: recomputes every checksum; a mismatch is an error.
// Hidden `baton ckpt bench`: save/load throughput of a GPT's full training state (numbers quoted in
// docs/checkpoints.md; a measurement, not a test).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "app/app.h"
#include "backend/device.h"
#include "core/error.h"
#include "core/timer.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "train/checkpoint/checkpoint_checksum.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/checkpoint_state.h"
#include "train/checkpoint/hf_gpt2.h"

namespace baton::app {
namespace {

double mb(double bytes) { return bytes / 1e6; }

}  // namespace

int run_ckpt_inspect(const CkptOptions& opts) {
  const std::string path = resolve_checkpoint(opts.path);
  CheckpointReader r(path);
  const CheckpointMeta& m = r.meta();
  std::printf("file: %s (%.1f MB)\n", path.c_str(), mb(static_cast<double>(r.file_bytes())));
  std::printf("format: %s v%lld | created %s by %s\n", kCheckpointFormatName,
              static_cast<long long>(m.format_version), m.created.c_str(), m.writer.c_str());
  std::printf("step: %lld | tokens consumed %lld | data position %lld | seed %llu\n",
              static_cast<long long>(m.step), static_cast<long long>(m.tokens_consumed),
              static_cast<long long>(m.data_position), static_cast<unsigned long long>(m.seed));
  std::printf("lr schedule: %s, lr %g -> %g, warm-up %lld, total %lld steps | last lr %g\n",
              m.lr.decay.c_str(), m.lr.lr, m.lr.min_lr, static_cast<long long>(m.lr.warmup_steps),
              static_cast<long long>(m.lr.total_steps), m.lr.last_lr);
  std::printf("layout: tp %lld, dp %lld, pp %lld, world %lld\n", static_cast<long long>(m.layout.tp),
              static_cast<long long>(m.layout.dp), static_cast<long long>(m.layout.pp),
              static_cast<long long>(m.layout.world));
  std::printf("checksum: %s\n", kChecksumAlgorithm);
  size_t width = 0;
  int64_t elements = 0;
  for (const TensorInfo& t : r.tensors()) {
    width = std::max(width, t.name.size());
    elements += t.numel();
  }
  std::printf("tensors: %zu (%lld elements)\n", r.tensors().size(), static_cast<long long>(elements));
  for (const TensorInfo& t : r.tensors())
    std::printf("  %-*s  %-14s %-8s %s\n", static_cast<int>(width), t.name.c_str(),
                shape_string(t.shape).c_str(), t.dtype.c_str(), checksum_hex(t.checksum).c_str());
  if (opts.show_config) std::printf("config:\n%s", m.config_toml.c_str());
  return 0;
}

int run_ckpt_verify(const CkptOptions& opts) {
  const std::string path = resolve_checkpoint(opts.path);
  Timer t;
  CheckpointReader r(path);
  const std::vector<CheckpointReader::Mismatch> bad = r.verify_all();
  for (const auto& b : bad)
    std::printf("MISMATCH %s: stored %s, computed %s\n", b.name.c_str(), checksum_hex(b.stored).c_str(),
                checksum_hex(b.computed).c_str());
  BATON_REQUIRE(bad.empty(),
                fmt::format("checkpoint '{}': {} of {} tensors fail their checksum (first: '{}')", path,
                            bad.size(), r.tensors().size(), bad.empty() ? "" : bad.front().name),
                "the file is damaged; resume from an older checkpoint");
  std::printf("ok: %s: %zu tensors, checksums match (%.1f MB in %.2f s)\n", path.c_str(),
              r.tensors().size(), mb(static_cast<double>(r.file_bytes())), t.seconds());
  return 0;
}

int run_ckpt_export(const CkptExportOptions& opts) {
  BATON_REQUIRE(opts.format == "hf", fmt::format("unknown export format '{}'", opts.format), "use --format hf");
  const std::string path = resolve_checkpoint(opts.path);
  Timer t;
  CheckpointReader r(path);
  // Validated for the world that wrote it (a pp = 2 run's config needs 2 ranks).
  const Config cfg = load_config_string(r.meta().config_toml, path + " (stored config)", {},
                                  static_cast<int>(r.meta().layout.world));
  BATON_REQUIRE(cfg.model.kind == ModelKind::GPT,
                fmt::format("checkpoint '{}' holds a {} model; only GPTs export to the Hugging Face format", path,
                            to_string(cfg.model.kind)),
                "export a checkpoint of a model.kind = \"gpt\" run");
  // The vocabulary (wte holds it padded to a multiple of 128): model.vocab_size, else the
  // tokenizer's; the tokenizer's end-of-text id becomes config.json's bos/eos_token_id.
  int tokenizer_vocab = 0, eos = -1;
  std::unique_ptr<Tokenizer> tok;
  if (!opts.tokenizer.empty()) {
    tok = Tokenizer::load(opts.tokenizer == cfg.data.tokenizer
                              ? TokenizerSpec{cfg.data.tokenizer, cfg.data.vocab_file, cfg.data.merge_file}
                              : TokenizerSpec{opts.tokenizer, {}, {}});
  } else if (!cfg.data.tokenizer.empty()) {
    try {
      tok = load_tokenizer(cfg.data);
    } catch (const Error& e) {
      // With model.vocab_size the tokenizer only gives the eos id: go on without it.
      if (cfg.model.vocab_size == 0)
        throw Error(e.what(), "pass --tokenizer MODEL (the tokenizer the run trained with: its size is the vocabulary)");
    }
  }
  if (tok) {
    tokenizer_vocab = tok->vocab_size();
    eos = tok->eos_id();
  }
  BATON_REQUIRE(cfg.model.vocab_size > 0 || tokenizer_vocab > 0,
                fmt::format("checkpoint '{}' takes its vocabulary size from a tokenizer, and its config names none",
                            path),
                "pass --tokenizer MODEL (the SentencePiece .model the run trained with)");
  const GptDims d = gpt_dims(cfg.model, tokenizer_vocab);
  const TensorInfo* wte = r.find(std::string(kParamsGroup) + "wte");
  BATON_REQUIRE(wte && wte->shape.size() == 2 && wte->shape[0] == d.vocab_padded,
                fmt::format("checkpoint '{}': params/wte is {}, the vocabulary {} pads to {} rows", path,
                            wte ? shape_string(wte->shape) : std::string("missing"), d.vocab, d.vocab_padded),
                "pass the --tokenizer the run trained with");
  const HfExportResult x = export_hf_gpt2(r, d, eos, opts.out);
  std::printf("exported %s (step %lld) to %s/: model.safetensors (%d tensors, %.1f MB, GPT2LMHeadModel names, "
              "lm_head tied to wte) + config.json | GPT-2 %d layers, n_embd %d, %d heads, n_positions %d, vocab %d"
              "%s | %.2f s\n",
              path.c_str(), static_cast<long long>(r.meta().step), opts.out.c_str(), x.tensors, mb(double(x.bytes)),
              d.n_layer, d.d_model, d.n_head, d.seq_len, d.vocab,
              d.vocab_padded > d.vocab ? fmt::format(" ({} padding rows of wte dropped)", d.vocab_padded - d.vocab).c_str()
                                       : "",
              t.seconds());
  return 0;
}

int run_ckpt_bench(const CkptBenchOptions& opts) {
  Config cfg;
  cfg.model.n_layer = opts.n_layer;
  cfg.model.n_head = opts.n_head;
  cfg.model.d_model = opts.d_model;
  cfg.model.seq_len = opts.seq_len;
  cfg.model.vocab_size = opts.vocab;
  cfg.checkpoint.dir = opts.dir;
  cfg.checkpoint.keep = 1;
  BackendChoice choice = choose_backend("cpu");
  SequentialModel model(make_gpt(gpt_dims(cfg.model, 0)), *choice.backend);
  model.init_weights(cfg.train.seed);
  AdamW opt(*choice.backend, model.table(), cfg.optim);
  HostTrainState host(model.table());
  // Non-trivial moments, as after training (the bytes written do not depend on the values).
  const size_t state_bytes = model.table().total() * sizeof(float);
  choice.backend->to_host(host.params.data(), model.params(), state_bytes);
  choice.backend->to_device(opt.m(), host.params.data(), state_bytes);
  choice.backend->to_device(opt.v(), host.params.data(), state_bytes);
  std::printf("reads below come from the page cache (the file was just written); for a cold read: "
              "sync; echo 3 > /proc/sys/vm/drop_caches; baton ckpt verify %s\n", opts.dir.c_str());
  std::printf("model: %lld parameters; state = params + AdamW m, v = %.1f MB\n",
              static_cast<long long>(model.table().count()), mb(3.0 * model.table().count() * 4));

  std::vector<double> save_s, read_s;
  uint64_t bytes = 0;
  for (int i = 0; i < opts.repeats; ++i) {
    const SaveResult w = save_train_state(cfg, model, opt, host, i + 1, 0.0);
    bytes = w.bytes;
    save_s.push_back(w.seconds);
    Timer t;
    read_train_state(w.path, model.table(), host);
    read_s.push_back(t.seconds());
    std::printf("run %d: save (blocks training) %.2f s = %.0f MB/s [write + fdatasync %.2f s, fsync+rename "
                "%.2f s] | read + verify %.2f s = %.0f MB/s\n",
                i + 1, w.seconds, mb(bytes) / w.seconds, w.write_seconds, w.sync_seconds,
                read_s.back(), mb(bytes) / read_s.back());
  }
  // Where a save's time goes: the checksum pass alone over the same shards.
  Timer t;
  uint64_t sink = 0;
  for (const TensorShard& s : host.shards(model.table())) sink += checksum_tensor(s.host_data, s.full_shape);
  const double checksum_s = t.seconds();
  std::sort(save_s.begin(), save_s.end());
  std::sort(read_s.begin(), read_s.end());
  const double ws = save_s[save_s.size() / 2], rs = read_s[read_s.size() / 2];
  std::printf("file %.1f MB | median save %.2f s (%.0f MB/s) | median read+verify %.2f s (%.0f MB/s) | "
              "checksums alone %.2f s (%.0f MB/s) [%s]\n",
              mb(bytes), ws, mb(bytes) / ws, rs, mb(bytes) / rs, checksum_s, mb(bytes) / checksum_s,
              checksum_hex(sink).c_str());
  return 0;
}

}  // namespace baton::app
