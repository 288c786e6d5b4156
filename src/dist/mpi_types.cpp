// DType/ReduceOp -> MPI mapping, including the user-defined BF16 reductions (see mpi_types.h).
#include "dist/mpi_types.h"

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace baton::dist::mpi {
namespace {

// MPI user op signature: inout[i] = in[i] (op) inout[i].
template <typename F>
void bf16_reduce(void* in, void* inout, int* len, F combine) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = f32_to_bf16(combine(bf16_to_f32(a[i]), bf16_to_f32(b[i])));
}

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return x + y; });
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return x > y ? x : y; });
}
void bf16_min(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return x < y ? x : y; });
}

MPI_Op g_bf16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};

}  // namespace

MPI_Datatype datatype(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::BF16: return MPI_UINT16_T;
    case DType::U8: return MPI_UINT8_T;
  }
  BATON_ASSERT(false, "unknown DType {}", static_cast<int>(t));
  return MPI_DATATYPE_NULL;
}

MPI_Op op(ReduceOp r, DType t) {
  if (t != DType::BF16) {
    switch (r) {
      case ReduceOp::SUM: return MPI_SUM;
      case ReduceOp::MAX: return MPI_MAX;
      case ReduceOp::MIN: return MPI_MIN;
    }
    BATON_ASSERT(false, "unknown ReduceOp {}", static_cast<int>(r));
  }
  const int i = static_cast<int>(r);
  BATON_ASSERT(i >= 0 && i < 3, "unknown ReduceOp {}", i);
  if (g_bf16_ops[i] == MPI_OP_NULL) {
    MPI_User_function* fns[3] = {bf16_sum, bf16_max, bf16_min};
    // Commutative: float addition of two operands is; the order of partial sums is MPI's.
    int rc = MPI_Op_create(fns[i], /*commute=*/1, &g_bf16_ops[i]);
    BATON_ASSERT(rc == MPI_SUCCESS, "MPI_Op_create for bf16 failed ({})", rc);
  }
  return g_bf16_ops[i];
}

void free_ops() {
  for (MPI_Op& o : g_bf16_ops)
    if (o != MPI_OP_NULL) MPI_Op_free(&o);  // sets o to MPI_OP_NULL
}

}  // namespace baton::dist::mpi
