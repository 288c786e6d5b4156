// `baton data build`: plain-text files -> (optionally) a new BPE tokenizer -> an indexed dataset
// PREFIX.bin / PREFIX.idx (Megatron-LM format). Documents follow data/text_documents.h: lines of
// exactly `<|endoftext|>` separate documents, each file ends one; the end-of-text id is appended
// after every document. Nothing is written under a final name until everything succeeded: the
// dataset goes through temporary names, a newly trained tokenizer is trained under a temporary
// prefix and renamed to PREFIX.model / PREFIX.vocab last.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "app/app.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "data/indexed_dataset.h"
#include "data/text_documents.h"
#include "data/tokenizer.h"

namespace baton::app {
namespace {

namespace fs = std::filesystem;

// Documents are encoded in parallel in batches of about this much text (bounds memory).
constexpr size_t kBatchBytes = 8u << 20;

// One status line on stdout: rewritten in place on a terminal, one line per 10% otherwise (logs).
class Progress {
 public:
  explicit Progress(int64_t total_bytes)
      : total_(std::max<int64_t>(total_bytes, 1)), tty_(::isatty(STDOUT_FILENO) != 0) {}

  void update(int64_t bytes, int64_t documents, int64_t tokens, bool force = false) {
    const int tenth = static_cast<int>(10 * bytes / total_);
    const double now = clock_.seconds();
    const bool due = tty_ ? now - last_print_ >= 0.25 : tenth > last_tenth_;
    if (bytes == last_bytes_ || (!due && !force)) return;
    last_bytes_ = bytes;
    last_print_ = now;
    last_tenth_ = tenth;
    const double pct = std::min(100.0, 100.0 * static_cast<double>(bytes) / total_);
    const double mbps = static_cast<double>(bytes) / 1e6 / std::max(now, 1e-9);
    std::printf("%stokenizing %5.1f%% | %s documents | %s tokens | %.1f MB/s%s", tty_ ? "\r" : "",
                pct, human_count(documents).c_str(), human_count(tokens).c_str(), mbps,
                tty_ ? "" : "\n");
    std::fflush(stdout);
  }
  void finish() {
    if (tty_) std::printf("\n");
    std::fflush(stdout);
  }
  double seconds() const { return clock_.seconds(); }

 private:
  int64_t total_;
  bool tty_;
  Timer clock_;
  double last_print_ = -1;
  int last_tenth_ = -1;
  int64_t last_bytes_ = -1;
};

// Encodes `docs` in parallel and appends each, followed by `eos`, to the dataset in order.
int64_t encode_batch(const Tokenizer& tok, const std::vector<std::string>& docs, int32_t eos,
                     IndexedDatasetWriter& writer) {
  std::vector<std::vector<int32_t>> encoded(docs.size());
  std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < static_cast<int64_t>(docs.size()); ++i) {
    try {  // exceptions must not leave an OpenMP region
      encoded[i] = tok.encode(docs[i]);
      encoded[i].push_back(eos);
    } catch (...) {
#pragma omp critical(baton_data_build_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
  int64_t tokens = 0;
  for (const auto& e : encoded) {
    writer.add_document(e);
    tokens += static_cast<int64_t>(e.size());
  }
  return tokens;
}

void rename_or_throw(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec)
    throw Error(fmt::format("cannot rename {} to {}: {}", from, to, ec.message()),
                "check permissions of the output directory");
}

}  // namespace

int run_data_build(const DataBuildOptions& opts) {
  if (opts.inputs.empty())
    throw Error("baton data build needs at least one --input file", "e.g. --input corpus/*.txt");
  if (opts.output.empty() || opts.output.back() == '/')
    throw Error(fmt::format("output prefix '{}' must name a file prefix", opts.output),
                "e.g. --output data/brown/brown-train (writes brown-train.bin and .idx)");
  int64_t total_bytes = 0;
  for (const auto& f : opts.inputs) {
    require_input_file(f);
    total_bytes += static_cast<int64_t>(fs::file_size(f));
  }
  // The outputs replace files by rename: one that names an input would destroy it (the dataset is
  // written while the inputs are read; a trained tokenizer's files are renamed in last).
  std::vector<std::string> outputs = {opts.output + ".bin", opts.output + ".idx"};
  if (opts.train_tokenizer > 0) outputs.insert(outputs.end(), {opts.output + ".model", opts.output + ".vocab"});
  for (const auto& out : outputs)
    for (const auto& in : opts.inputs) {
      std::error_code ec;
      if (fs::equivalent(out, in, ec))
        throw Error(fmt::format("--output {} would overwrite {}, an input of this build", opts.output, in),
                    "choose another --output prefix");
    }
  const fs::path parent = fs::path(opts.output).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec)
      throw Error(
          fmt::format("cannot create output directory {}: {}", parent.string(), ec.message()),
          "choose a writable --output location");
  }

  // Tokenizer: a new one under a temporary prefix (renamed at the end), or an existing one.
  const std::string tmp_prefix = opts.output + ".tokenizer-tmp";
  std::unique_ptr<Tokenizer> tok;
  if (opts.train_tokenizer > 0) {
    log::info("training a {}-token BPE tokenizer on {} file(s), {:.1f} MB", opts.train_tokenizer,
              opts.inputs.size(), total_bytes / 1e6);
    Timer t;
    tok = Tokenizer::load(Tokenizer::train(opts.inputs, tmp_prefix, opts.train_tokenizer));
    log::info("tokenizer trained in {:.1f} s", t.seconds());
  } else {
    tok = Tokenizer::load(TokenizerSpec{opts.tokenizer, opts.vocab_file, opts.merge_file});
  }
  auto discard_tmp_tokenizer = [&] {
    std::error_code ec;
    fs::remove(tmp_prefix + ".model", ec);
    fs::remove(tmp_prefix + ".vocab", ec);
  };

  try {
    const int32_t eos = tok->eos_id();
    if (eos < 0)
      throw Error(fmt::format("tokenizer {} has no end-of-text piece (eos_id; GPT-2: `<|endoftext|>`)",
                              tok->path()),
                  "train one with `baton data build --train-tokenizer VOCAB` or use a "
                  "SentencePiece model trained with --eos_id (a GPT-2 vocabulary with `<|endoftext|>`)");
    const TokenDType dtype = token_dtype_for_vocab(tok->vocab_size());
    IndexedDatasetWriter writer(opts.output, dtype);

    Progress progress(total_bytes);
    int64_t done_bytes = 0, documents = 0, tokens = 0;
    std::vector<std::string> batch;
    for (const auto& file : opts.inputs) {
      DocumentReader reader(file);
      std::string doc;
      size_t batch_bytes = 0;
      auto flush = [&] {
        tokens += encode_batch(*tok, batch, eos, writer);
        documents += static_cast<int64_t>(batch.size());
        batch.clear();
        batch_bytes = 0;
        progress.update(done_bytes + reader.bytes_read(), documents, tokens);
      };
      while (reader.next(doc)) {
        batch_bytes += doc.size();
        batch.push_back(std::move(doc));
        if (batch_bytes >= kBatchBytes) flush();
      }
      flush();
      done_bytes += reader.bytes_read();
    }
    progress.update(done_bytes, documents, tokens, /*force=*/true);
    progress.finish();
    if (documents == 0) throw Error("the input files contain no text", "check the --input files");

    writer.finalize();
    std::string model_note;
    if (opts.train_tokenizer > 0) {
      rename_or_throw(tmp_prefix + ".model", opts.output + ".model");
      rename_or_throw(tmp_prefix + ".vocab", opts.output + ".vocab");
      model_note = fmt::format(", {0}.model, {0}.vocab", opts.output);
    }
    log::info("wrote {0}.bin, {0}.idx{1}", opts.output, model_note);
    log::info("{} documents, {} tokens ({}, vocabulary {}), {:.1f} MB of text in {:.1f} s ({:.1f} MB/s, "
              "{} threads)",
              documents, tokens, dtype == TokenDType::U16 ? "uint16" : "int32", tok->vocab_size(),
              total_bytes / 1e6, progress.seconds(), total_bytes / 1e6 / std::max(progress.seconds(), 1e-9),
              omp_get_max_threads());
  } catch (...) {
    if (opts.train_tokenizer > 0) discard_tmp_tokenizer();
    throw;
  }
  return 0;
}

}  // namespace baton::app
