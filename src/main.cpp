// baton: argv only. Parses the command line with CLI11 and calls one subcommand in app/. Every
// error leaves as `error: ...` and `hint: ...` on stderr with a non-zero exit code.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "app/app.h"
#include "core/error.h"

namespace {

int report(const std::string& what, const std::string& hint) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  if (!hint.empty()) std::fprintf(stderr, "hint: %s\n", hint.c_str());
  std::fflush(stderr);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace baton::app;
  CLI::App cli{"baton: train GPT-style transformers and CNNs across many GPUs", "baton"};
  cli.require_subcommand(0, 1);
  bool show_version = false;
  cli.add_flag("--version", show_version, "print the version and the build's features");

  TrainOptions train;
  auto* train_cmd = cli.add_subcommand("train", "train a model described by a TOML config");
  train_cmd->add_option("config", train.config, "config file (TOML)")->required();
  train_cmd->add_option("--set", train.overrides, "override a key: section.key=value (repeatable)");

  auto* data_cmd = cli.add_subcommand("data", "prepare datasets");
  data_cmd->require_subcommand(1);
  DataBuildOptions build;
  auto* build_cmd = data_cmd->add_subcommand(
      "build", "tokenize text files into an indexed dataset (PREFIX.bin + PREFIX.idx)");
  build_cmd->add_option("--input", build.inputs, "plain-text input files (a line `<|endoftext|>` or the end of a file ends a document)")->required();
  build_cmd->add_option("--output", build.output, "output prefix")->required();
  auto* train_tok = build_cmd->add_option("--train-tokenizer", build.train_tokenizer,
                                          "train a BPE tokenizer with this vocabulary size");
  auto* use_tok = build_cmd->add_option("--tokenizer", build.tokenizer,
                                        "use an existing SentencePiece .model");
  train_tok->excludes(use_tok);

  GenerateOptions gen;
  auto* gen_cmd = cli.add_subcommand("generate", "sample text from a trained checkpoint");
  gen_cmd->add_option("--checkpoint", gen.checkpoint, "checkpoint file or directory")->required();
  gen_cmd->add_option("--prompt", gen.prompt, "text to continue")->required();
  gen_cmd->add_option("--tokenizer", gen.tokenizer, "SentencePiece .model (default: from the checkpoint's config)");
  gen_cmd->add_option("--tokens", gen.tokens, "tokens to generate")->check(CLI::Range(1, 100000));
  gen_cmd->add_option("--temperature", gen.temperature, "sampling temperature (0 = greedy)")->check(CLI::Range(0.0, 100.0));
  gen_cmd->add_option("--top-k", gen.top_k, "sample among the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
  gen_cmd->add_option("--seed", gen.seed, "sampling seed");

  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return cli.exit(e);
  } catch (const CLI::ParseError& e) {
    return report(e.what(), "run `baton --help` or `baton <command> --help` for usage");
  }

  try {
    if (show_version) {
      std::fputs(version_text().c_str(), stdout);
      return 0;
    }
    if (train_cmd->parsed()) return run_train(train);
    if (build_cmd->parsed()) {
      if (build.train_tokenizer <= 0 && build.tokenizer.empty())
        return report("baton data build needs --train-tokenizer VOCAB or --tokenizer MODEL",
                      "e.g. --train-tokenizer 8192 to train a new BPE tokenizer");
      return run_data_build(build);
    }
    if (gen_cmd->parsed()) return run_generate(gen);
    std::fputs(cli.help().c_str(), stdout);
    return 0;
  } catch (const baton::Error& e) {
    return report(e.what(), e.hint());
  } catch (const std::bad_alloc&) {
    return report("out of memory", "use a smaller model, micro_batch or seq_len");
  } catch (const std::exception& e) {
    return report(e.what(), "this may be a bug in baton; please report it with the config");
  }
}
