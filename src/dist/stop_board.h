// StopBoard: how ranks that do not step in lockstep — HetPipe's virtual workers under WSP, each at
// its own minibatch — learn that one of them was asked to stop (SIGTERM/SIGINT), without a
// collective that would make them wait for each other (docs/hetpipe.md "Stopping a run").
//
// One int64 on rank 0 of the communicator, written once: the first raise() posts its value (an
// exclusive epoch that writes only when empty; later raises keep the first) and copies the posted
// value to every rank before it returns; read() looks at this rank's own copy (every minibatch:
// it must cost nothing and never wait for a busy rank 0). Passive-target one-sided MPI, like the
// parameter server (dist/param_server.h): nobody runs a loop for it. The value WSP posts is the raiser's completed waves; from it every rank
// computes the same stop step (train/hetero/wsp_stage.h).
//
// Invariant: construction and destruction are collective over the communicator; raise() and
// read() are independent, from one thread at a time per rank.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <optional>

namespace baton::dist {

class StopBoard {
 public:
  explicit StopBoard(MPI_Comm comm);  // collective
  ~StopBoard();                       // collective (MPI_Win_free)
  StopBoard(const StopBoard&) = delete;
  StopBoard& operator=(const StopBoard&) = delete;

  // Posts `value` (>= 0) unless a value is posted already; returns the posted value.
  int64_t raise(int64_t value);
  // The posted value, if any.
  std::optional<int64_t> read();

 private:
  MPI_Win win_ = MPI_WIN_NULL;
  int64_t* base_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace baton::dist
