// How dist::DType and dist::ReduceOp map onto MPI datatypes and reduction ops. Internal to the
// MPI backend (mpi_comm.cpp, mpi_runtime.cpp).
//
// BF16 has no MPI datatype: it travels as MPI_UINT16_T and reduces through user-defined ops that
// widen to float, combine, and round to nearest even. Those ops are created on first use and
// released by free_mpi_ops() before MPI_Finalize.
#pragma once
#include <mpi.h>

#include "dist/comm.h"

namespace baton::dist::mpi {

MPI_Datatype datatype(DType t);
MPI_Op op(ReduceOp r, DType t);
void free_ops();

}  // namespace baton::dist::mpi
