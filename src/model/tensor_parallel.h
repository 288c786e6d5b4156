// Megatron tensor parallelism as named conjugate pairs, so layers never call raw collectives
// (notes-dissertation §3, PTD-P "tensor model parallelism"; Korthikanti et al. for sequence
// parallelism). A tensor-parallel region is entered before a column-parallel linear and left after
// a row-parallel one:
//
//                 without sequence parallelism       with sequence parallelism
//   enter  fwd    f: identity                        all-gather rows   [N/tp,C] -> [N,C]
//          bwd    f: all-reduce                      reduce-scatter    [N,C] -> [N/tp,C]
//   exit   fwd    g: all-reduce                      reduce-scatter    [N,C] -> [N/tp,C]
//          bwd    g: identity                        all-gather        [N/tp,C] -> [N,C]
//
// Outside the regions (layernorm, residual adds) each rank holds all N = B*T rows, or N/tp of them
// with sequence parallelism: a contiguous block of rows, which is all row-wise ops need.
#pragma once
#include <cstddef>

#include "backend/backend.h"
#include "dist/comm.h"

namespace baton {

struct TensorParallel {
  int rank = 0;
  int size = 1;
  bool sequence_parallel = false;
  dist::Comm* comm = nullptr;  // the tensor-parallel group; may be null when size == 1
  DType act = DType::F32;      // activations' dtype (the model sets the backend's act_dtype)

  bool active() const { return size > 1; }
  bool sp() const { return sequence_parallel && size > 1; }
  // Rows of the residual stream this rank holds.
  int local_rows(int N) const { return sp() ? N / size : N; }

  // Each returns where the result is: the input pointer itself when the pair is an identity or an
  // in-place all-reduce, else `buf`. Activations in `act` (bf16 collectives move half the bytes).
  const void* enter(const void* x_local, void* buf, int N, int C) const;
  void* enter_backward(void* dfull_partial, void* buf, int N, int C) const;
  void* exit(void* partial_full, void* buf, int N, int C) const;
  const void* exit_backward(const void* dlocal, void* buf, int N, int C) const;
  // fp32 sums over the tensor-parallel group, in place (e.g. partial layernorm gradients under
  // sequence parallelism, or classifier statistics).
  void all_reduce_sum(float* x, size_t n) const;
  void all_reduce_max(float* x, size_t n) const;
};

}  // namespace baton
