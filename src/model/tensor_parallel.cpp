#include "model/tensor_parallel.h"

#include "core/error.h"

namespace baton {

using dist::DType;
using dist::ReduceOp;

const void* TensorParallel::enter(const void* x_local, void* buf, int N, int C) const {
  if (!sp()) return x_local;
  comm->all_gather(x_local, buf, size_t(N / size) * C, act);
  return buf;
}

void* TensorParallel::enter_backward(void* dfull, void* buf, int N, int C) const {
  if (!active()) return dfull;
  if (!sp()) {
    comm->all_reduce(dfull, size_t(N) * C, act, ReduceOp::SUM);
    return dfull;
  }
  comm->reduce_scatter(dfull, buf, size_t(N / size) * C, act, ReduceOp::SUM);
  return buf;
}

void* TensorParallel::exit(void* partial, void* buf, int N, int C) const {
  return enter_backward(partial, buf, N, C);  // g forward == f backward
}

const void* TensorParallel::exit_backward(const void* dlocal, void* buf, int N, int C) const {
  return enter(dlocal, buf, N, C);  // g backward == f forward
}

void TensorParallel::all_reduce_sum(float* x, size_t n) const {
  if (active()) comm->all_reduce(x, n, DType::F32, ReduceOp::SUM);
}

void TensorParallel::all_reduce_max(float* x, size_t n) const {
  if (active()) comm->all_reduce(x, n, DType::F32, ReduceOp::MAX);
}

}  // namespace baton
