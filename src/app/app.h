// Subcommands of the baton executable. main.cpp parses argv (CLI11) and calls one of these; each
// returns the process exit code and throws baton::Error for user errors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace baton::app {

struct TrainOptions {
  std::string config;
  std::vector<std::string> overrides;  // "section.key=value"
};
int run_train(const TrainOptions& opts);

struct GenerateOptions {
  std::string checkpoint;  // a weights file, or a directory holding them
  std::string prompt;
  std::string tokenizer;   // optional; default: the one named in the checkpoint's config
  int tokens = 64;
  double temperature = 0.8;
  int top_k = 40;
  uint64_t seed = 1;
};
int run_generate(const GenerateOptions& opts);

struct DataBuildOptions {
  std::vector<std::string> inputs;  // plain-text files; a line `<|endoftext|>` or the file's end ends a document
  std::string output;               // dataset prefix: writes PREFIX.bin, PREFIX.idx
  int train_tokenizer = 0;          // > 0: train a BPE tokenizer of this vocabulary size
  std::string tokenizer;            // else: an existing SentencePiece .model
};
int run_data_build(const DataBuildOptions& opts);

// `baton --version`: version and build features.
std::string version_text();

}  // namespace baton::app
