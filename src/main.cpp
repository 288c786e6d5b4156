// baton: argv only. Parses the command line with CLI11 and calls one subcommand in app/. Every
// error leaves as `error: ...` and `hint: ...` on stderr with a non-zero exit code.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>

#include "app/app.h"
#include "core/error.h"
#include "pipeline/schedules.h"

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
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported like any I/O error,
  // instead of killing the process mid-save with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App cli{"baton: train GPT-style transformers and CNNs across many GPUs", "baton"};
  cli.require_subcommand(0, 1);
  bool show_version = false;
  cli.add_flag("--version", show_version, "print the version and the build's features");

  TrainOptions train;
  auto* train_cmd = cli.add_subcommand("train", "train a model described by a TOML config");
  train_cmd->add_option("config", train.config, "config file (TOML)")->required();
  train_cmd->add_option("--set", train.overrides, "override a key: section.key=value (repeatable)");
  train_cmd->add_flag("--log-all-ranks", train.log_all_ranks,
                      "every rank prints its log lines, prefixed [rank r] (default: rank 0 only)");

  BenchOptions bench_opts;
  auto* bench_run_cmd = cli.add_subcommand(
      "bench", "time training steps of a config on synthetic data: tokens/s (images/s), TFLOP/s, MFU");
  bench_run_cmd->add_option("config", bench_opts.config, "config file (TOML)")->required();
  bench_run_cmd->add_option("--set", bench_opts.overrides, "override a key: section.key=value (repeatable)");
  bench_run_cmd->add_option("--warmup", bench_opts.warmup, "untimed steps first (default 3)")
      ->check(CLI::Range(0, 1000000));
  bench_run_cmd->add_option("--steps", bench_opts.steps, "timed steps (default 10)")
      ->check(CLI::Range(1, 1000000));
  bench_run_cmd->add_option("--json", bench_opts.json,
                            "also write the results to this JSON file (rank 0; for scripts)");

  EvalOptions eval_opts;
  auto* eval_cmd = cli.add_subcommand(
      "eval", "validation loss (and a CNN's top-1/top-5 accuracy) of a checkpoint");
  eval_cmd->add_option("config", eval_opts.config, "config file (TOML) naming data.valid")->required();
  eval_cmd->add_option("--checkpoint", eval_opts.checkpoint, "checkpoint file or directory (its newest)")
      ->required();
  eval_cmd->add_option("--set", eval_opts.overrides, "override a key: section.key=value (repeatable)");
  eval_cmd->add_option("--batches", eval_opts.batches,
                       "validation batches of train.global_batch (default: the whole validation set)")
      ->check(CLI::Range(0, 100000000));
  eval_cmd->add_option("--json", eval_opts.json, "also write the results to this JSON file (rank 0)");

  auto* data_cmd = cli.add_subcommand("data", "prepare datasets");
  data_cmd->require_subcommand(1);
  DataImagesOptions images_opts;
  auto* images_cmd = data_cmd->add_subcommand(
      "images", "write one batch of a CNN's images as the trainer gets them (FILE: float32 NCHW, FILE.labels: int32)");
  images_cmd->add_option("config", images_opts.config, "config file (TOML)")->required();
  images_cmd->add_option("--set", images_opts.overrides, "override a key: section.key=value (repeatable)");
  images_cmd->add_option("--out", images_opts.out, "output file")->required();
  images_cmd->add_option("--split", images_opts.split, "valid (default) or train")->check(CLI::IsMember({"valid", "train"}));
  images_cmd->add_option("--batch", images_opts.batch, "validation batch, or training step (default 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  images_cmd->add_option("--rows", images_opts.rows, "rows of the batch (default train.global_batch)")
      ->check(CLI::Range(0, 1 << 20));
  DataBuildOptions build;
  auto* build_cmd = data_cmd->add_subcommand(
      "build", "tokenize text files into an indexed dataset (PREFIX.bin + PREFIX.idx)");
  build_cmd->add_option("--input", build.inputs, "plain-text input files (a line `<|endoftext|>` or the end of a file ends a document)")->required();
  build_cmd->add_option("--output", build.output, "output prefix")->required();
  auto* train_tok = build_cmd->add_option("--train-tokenizer", build.train_tokenizer,
                                          "train a BPE tokenizer with this vocabulary size");
  auto* use_tok = build_cmd->add_option("--tokenizer", build.tokenizer,
                                        "use an existing SentencePiece .model, or gpt2-bpe (GPT-2's BPE: "
                                        "--vocab-file and --merge-file)");
  auto* vocab_file = build_cmd->add_option("--vocab-file", build.vocab_file,
                                           "gpt2-bpe: GPT-2's encoder.json (Megatron's vocab.json)");
  auto* merge_file = build_cmd->add_option("--merge-file", build.merge_file,
                                           "gpt2-bpe: GPT-2's vocab.bpe (Megatron's merges.txt)");
  train_tok->excludes(use_tok)->excludes(vocab_file)->excludes(merge_file);

  GenerateOptions gen;
  auto* gen_cmd = cli.add_subcommand("generate", "sample text from a trained checkpoint");
  gen_cmd->add_option("--checkpoint", gen.checkpoint, "checkpoint file or directory")->required();
  gen_cmd->add_option("--prompt", gen.prompt, "text to continue")->required();
  gen_cmd->add_option("--tokenizer", gen.tokenizer,
                      "SentencePiece .model, or gpt2-bpe (default: from the checkpoint's config)");
  gen_cmd->add_option("--vocab-file", gen.vocab_file,
                      "gpt2-bpe: GPT-2's encoder.json (default: the checkpoint config's data.vocab_file)");
  gen_cmd->add_option("--merge-file", gen.merge_file,
                      "gpt2-bpe: GPT-2's vocab.bpe (default: the checkpoint config's data.merge_file)");
  gen_cmd->add_option("--tokens", gen.tokens, "tokens to generate")->check(CLI::Range(1, 100000));
  gen_cmd->add_option("--temperature", gen.temperature, "sampling temperature (0 = greedy)")->check(CLI::Range(0.0, 100.0));
  gen_cmd->add_option("--top-k", gen.top_k, "sample among the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
  gen_cmd->add_option("--seed", gen.seed, "sampling seed");
  gen_cmd->add_option("--logits", gen.logits,
                      "also write the prompt's logits to this JSON file ({\"tokens\": [...], \"logits\": [[V floats] per "
                      "token]}: the first seq_len tokens, one forward pass)");

  auto* ckpt_cmd = cli.add_subcommand("ckpt", "inspect, verify and export HDF5 checkpoints");
  ckpt_cmd->require_subcommand(1);
  CkptOptions ckpt;
  auto* inspect_cmd = ckpt_cmd->add_subcommand("inspect", "print a checkpoint's metadata and tensors");
  inspect_cmd->add_option("path", ckpt.path, "checkpoint file, or directory (its newest)")->required();
  inspect_cmd->add_flag("--config", ckpt.show_config, "also print the stored resolved config");
  auto* verify_cmd = ckpt_cmd->add_subcommand("verify", "recompute every tensor's checksum");
  verify_cmd->add_option("path", ckpt.path, "checkpoint file, or directory (its newest)")->required();
  CkptExportOptions ckpt_export;
  auto* export_cmd = ckpt_cmd->add_subcommand(
      "export", "write a GPT checkpoint as a Hugging Face GPT-2 directory (model.safetensors + config.json)");
  export_cmd->add_option("path", ckpt_export.path, "checkpoint file, or directory (its newest)")->required();
  export_cmd->add_option("out", ckpt_export.out, "output directory (created; its model.safetensors and config.json "
                                                 "are replaced)")->required();
  export_cmd->add_option("--format", ckpt_export.format, "output format: hf (Hugging Face GPT2LMHeadModel)")
      ->check(CLI::IsMember({"hf"}));
  export_cmd->add_option("--tokenizer", ckpt_export.tokenizer,
                         "SentencePiece .model giving the vocabulary size (default: the one named in the "
                         "checkpoint's config; not needed with model.vocab_size)");
  CkptBenchOptions bench;
  auto* bench_cmd = ckpt_cmd->add_subcommand("bench", "")->group("");  // hidden: docs/checkpoints.md
  bench_cmd->add_option("--dir", bench.dir);
  bench_cmd->add_option("--n-layer", bench.n_layer);
  bench_cmd->add_option("--n-head", bench.n_head);
  bench_cmd->add_option("--d-model", bench.d_model);
  bench_cmd->add_option("--seq-len", bench.seq_len);
  bench_cmd->add_option("--vocab", bench.vocab);
  bench_cmd->add_option("--repeats", bench.repeats);

  PlanOptions plan;
  auto* plan_cmd = cli.add_subcommand("plan", "choose a parallel layout (tp, pp, dp, vp, micro-batch, schedule, recompute) for a cluster");
  plan_cmd->add_option("config", plan.config, "TOML config")->required();
  plan_cmd->add_option("--cluster", plan.cluster, "cluster file (configs/clusters/*.toml)")->required();
  plan_cmd->add_option("--gpus", plan.gpus, "use the cluster's first N GPUs (default: all)");
  plan_cmd->add_option("--top", plan.top_k, "layouts to print (default 5)");
  plan_cmd->add_flag("--evaluate", plan.evaluate, "predict the config's own layout instead of searching");
  plan_cmd->add_option("--format", plan.format, "table or json");
  plan_cmd->add_option("--output", plan.output, "write the best layout's TOML snippet to this file");
  plan_cmd->add_option("--set", plan.overrides, "override a config key: section.key=value");
  plan_cmd->add_option("--algorithm", plan.algorithm, "ptdp (layout search, default), pipedream, hetpipe or madpipe (partitioners)");
  plan_cmd->add_option("--profile", plan.profile, "measured profile from `baton profile` instead of the analytical one");
  plan_cmd->add_option("--policy", plan.policy, "hetpipe: virtual workers by np, ed or hd (default hd)");
  plan_cmd->add_option("--nm", plan.nm,
                       "hetpipe: concurrent minibatches per virtual worker (default: the smallest Max_m, or the "
                       "best predicted throughput when memory does not bound it)");
  plan_cmd->add_option("--gpu-memory-gb", plan.gpu_memory_gb,
                       "hetpipe: every GPU's memory for the partition, GB (default: the device's less the cost "
                       "model's 3 GB overhead)");
  plan_cmd->add_option("--vw-size", plan.vw_size, "hetpipe: GPUs per virtual worker (default: GPUs of the first node)");
  plan_cmd->add_option("--schedules", plan.schedules,
                       "ptdp search: schedule kinds to consider, comma-separated, or all (default: the "
                       "synchronous ones; asynchronous kinds such as 2bw only when named)");
  plan_cmd->add_option("--recompute", plan.recompute,
                       "ptdp search: recomputation modes to consider, a subset of none,selective,full (default: all)");

  ProfileOptions prof;
  auto* prof_cmd = cli.add_subcommand("profile", "measure per-layer forward/backward time and memory on this device");
  prof_cmd->add_option("config", prof.config, "TOML config")->required();
  prof_cmd->add_option("--out", prof.out, "profile JSON to write")->required();
  prof_cmd->add_option("--repeats", prof.repeats, "timed repetitions per layer (default 3)");
  prof_cmd->add_option("--set", prof.overrides, "override a config key: section.key=value");

  ScheduleOptions sched;
  auto* sched_cmd = cli.add_subcommand("schedule", "print, simulate or trace a pipeline schedule");
  sched_cmd->add_option("--kind", sched.kind, fmt::format("schedule kind: {}", fmt::join(baton::pipeline::schedule_kinds(), ", ")))->required();
  sched_cmd->add_option("--pp", sched.pp, "pipeline stages")->required();
  sched_cmd->add_option("--vp", sched.vp, "model chunks per rank (interleaved)");
  sched_cmd->add_option("--microbatches", sched.microbatches, "microbatches per optimizer step")->required();
  sched_cmd->add_option("--steps", sched.steps, "optimizer steps (batches) to schedule");
  sched_cmd->add_option("--costs", sched.costs, "F,B[,W]: per-microbatch costs of one rank (default 1,2)");
  sched_cmd->add_option("--send-cost", sched.send, "latency of one point-to-point message (default 0)");
  sched_cmd->add_option("--replicas", sched.replicas, "pipedream: workers per stage, e.g. 2,1 (1F1B-RR)");
  sched_cmd->add_flag("--vertical-sync", sched.vertical_sync, "pipedream: all stages use the input stage's weight version");
  sched_cmd->add_flag("--lowered", sched.lowered, "grid: show sends, receives and optimizer steps");
  sched_cmd->add_option("--format", sched.format, "grid (one row per rank), json or trace (Chrome trace)");
  sched_cmd->add_option("--output", sched.output, "write to this file instead of stdout");

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
    if (bench_run_cmd->parsed()) return run_bench(bench_opts);
    if (eval_cmd->parsed()) return run_eval(eval_opts);
    if (build_cmd->parsed()) {
      if (build.train_tokenizer <= 0 && build.tokenizer.empty())
        return report("baton data build needs --train-tokenizer VOCAB or --tokenizer MODEL",
                      "e.g. --train-tokenizer 8192 to train a new BPE tokenizer, or --tokenizer gpt2-bpe "
                      "--vocab-file encoder.json --merge-file vocab.bpe for GPT-2's");
      return run_data_build(build);
    }
    if (images_cmd->parsed()) return run_data_images(images_opts);
    if (gen_cmd->parsed()) return run_generate(gen);
    if (sched_cmd->parsed()) return run_schedule(sched);
    if (plan_cmd->parsed()) return run_plan(plan);
    if (prof_cmd->parsed()) return run_profile(prof);
    if (inspect_cmd->parsed()) return run_ckpt_inspect(ckpt);
    if (verify_cmd->parsed()) return run_ckpt_verify(ckpt);
    if (export_cmd->parsed()) return run_ckpt_export(ckpt_export);
    if (bench_cmd->parsed()) return run_ckpt_bench(bench);
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
