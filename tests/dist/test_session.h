// Shared by the multi-rank invariance, semantics and property tests (and the bubble bench): a
// TrainSession built exactly as `baton train` builds it — from a validated Config — for a tiny GPT
// on synthetic rows that are a pure function of (seed, step, row), so every layout sees the same
// global batch. One process (the reference) runs on a SelfComm world.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "dist/self_comm.h"
#include "tiny_gpt.h"
#include "train/loop/session.h"

namespace baton::test {

struct TestLayout {
  int tp = 1, dp = 1;
  int pp = 1;  // ranks of a pipeline (with replicas: their sum; parallel.pp is their count)
  int vp = 1;
  std::string schedule = "1f1b";
  bool sp = false, zero1 = false, scatter_gather = false, vertical_sync = false;
  std::string recompute = "none";
  int64_t drain_every = 0;                 // checkpoint.every: the asynchronous drain period
  std::vector<int> replicas;               // 1F1B-RR
  std::vector<std::vector<int>> stages;    // explicit boundaries (empty: even split)
};

struct TestRun {
  GptDims dims;
  int global_batch = 8, micro_batch = 1;
  int64_t steps = 10;
  uint64_t init_seed = 5;
  double weight_decay = 0.1, eps = 1e-8, grad_clip = 1.0;
  double bucket_mb = 4096.0 / 1048576.0;  // small buckets: several per step
  std::string compute = "fp32";            // precision.compute ("bf16": the CPU's bf16 emulation)
};

// The config of `l` and `r` for `world_size` ranks, validated as load_config would.
inline Config test_config(const TestLayout& l, const TestRun& r, int world_size) {
  Config c;
  c.model.n_layer = r.dims.n_layer;
  c.model.n_head = r.dims.n_head;
  c.model.d_model = r.dims.d_model;
  c.model.seq_len = r.dims.seq_len;
  c.model.vocab_size = r.dims.vocab;
  c.train.steps = r.steps;
  c.train.global_batch = r.global_batch;
  c.train.micro_batch = r.micro_batch;
  c.train.seed = r.init_seed;
  c.optim.weight_decay = r.weight_decay;
  c.optim.eps = r.eps;
  c.optim.grad_clip = r.grad_clip;
  c.optim.warmup_steps = 0;
  c.parallel.tp = l.tp;
  c.parallel.pp = l.replicas.empty() ? l.pp : static_cast<int>(l.replicas.size());
  c.parallel.vp = l.vp;
  c.parallel.schedule = l.schedule;
  c.parallel.sequence_parallel = l.sp;
  c.parallel.zero1 = l.zero1;
  c.parallel.scatter_gather = l.scatter_gather;
  c.parallel.vertical_sync = l.vertical_sync;
  c.parallel.recompute = l.recompute;
  c.parallel.replicas = l.replicas;
  c.parallel.stages = l.stages;
  c.parallel.bucket_mb = r.bucket_mb;
  c.precision.device = "cpu";
  c.precision.compute = r.compute;
  c.checkpoint.every = l.drain_every;
  validate(c, world_size);
  return c;
}

using TokenRows = std::function<void(int64_t step, int row, int rows, int32_t* x, int32_t* y)>;

// A BatchSource over a token-row function (inputs and next-token targets).
class RowsSource final : public BatchSource {
 public:
  RowsSource(TokenRows rows, int T) : rows_(std::move(rows)), T_(T) {}
  void train_rows(int64_t step, int row, int n, HostBatch& out) const override {
    out.B = n;
    out.T = T_;
    out.tokens.resize(size_t(n) * T_);
    out.targets.resize(size_t(n) * T_);
    rows_(step, row, n, out.tokens.data(), out.targets.data());
  }
  std::string describe() const override { return "test rows"; }

 private:
  TokenRows rows_;
  int T_;
};

// The session of `l` on `world` (null: one process).
inline std::unique_ptr<TrainSession> test_session(const TestLayout& l, const TestRun& r, dist::Comm* world,
                                                  const TokenRows& rows, SessionOptions options = {}) {
  static dist::SelfComm alone;
  dist::Comm& w = world ? *world : alone;
  const Config cfg = test_config(l, r, w.size());
  return std::make_unique<TrainSession>(cfg, w, model_builder(cfg, 0),
                                        std::make_unique<RowsSource>(rows, r.dims.seq_len), options);
}

}  // namespace baton::test
