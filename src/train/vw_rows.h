// A virtual worker's rows of each global batch (train/wsp_trainer.h "data"): VW k's minibatch p is
// rows [k·b, (k+1)·b) of global batch p − 1 — data-parallel rank k's slice of step p − 1. Validation
// batches are the same for every VW: each evaluates its own w_local on them. Shared by the WSP and
// allreduce trainers and the single-process reference of the WSP rule (tests/wsp_reference.cpp).
#pragma once
#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>

#include "train/batch_source.h"

namespace baton {

class VwRows final : public BatchSource {
 public:
  VwRows(std::unique_ptr<BatchSource> inner, int row0, int rows) : inner_(std::move(inner)), row0_(row0), rows_(rows) {}
  void train_rows(int64_t step, int row, int n, HostBatch& out) const override {
    inner_->train_rows(step, row0_ + row, n, out);
  }
  bool has_valid() const override { return inner_->has_valid(); }
  void valid_rows(int batch, int rows, int row, int n, HostBatch& out) const override {
    inner_->valid_rows(batch, rows, row, n, out);
  }
  int64_t valid_samples() const override { return inner_->valid_samples(); }
  std::string describe() const override {
    return fmt::format("{} | this VW: rows [{}, {}) of each global batch", inner_->describe(), row0_, row0_ + rows_);
  }
  std::string baseline() const override { return inner_->baseline(); }

 private:
  std::unique_ptr<BatchSource> inner_;
  int row0_, rows_;
};

}  // namespace baton
