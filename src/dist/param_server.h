// The parameter server's data path for WSP (HetPipe §5, digest §B.3; docs/hetpipe.md "The parameter
// server"): w_global sharded over the ranks of a communicator, pushes that add a VW's wave update
// (w_global += ũ, the paper's additive rule) and pulls that return w_global once every VW has
// pushed enough waves. The control plane (which clock a pull needs) is wsp::ServerClock's rule;
// this class moves the floats and counts the pushed waves.
//
// Built on passive-target one-sided MPI, so no rank runs a server loop or a progress thread:
// - every rank hosts one shard: one window holding one pushed-wave counter per VW (int64) and the
//   shard's tensors (fp32); tensor i lives on shard i mod (number of ranks) (round robin);
// - a push, per shard: one exclusive epoch with MPI_Accumulate(SUM) of the shard's part of ũ and
//   +1 on the VW's counter, so a reader sees a shard's data and counters change together;
// - a pull, per shard: one shared epoch reading the counters and the data. Shards are separate
//   epochs, so a push may be half-way through the shards while a pull reads them; the pull is a
//   consistent snapshot only when every shard shows the same counters, otherwise it re-reads
//   (pushes are one per wave, so this converges). Its counters are then exactly which waves of
//   which VW w_global contains — the version vector WorkerClock::complete_pull checks.
// - a pull whose counters do not yet allow it sleeps and retries (back-off up to 2 ms): waiting
//   never spins on a core that a co-located rank computes on.
// Invariant: a VW pushes from one rank at a time, its waves in order; every rank of `comm` calls
// the constructor, init() and the destructor (collectives), pushes and pulls are independent.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace baton::dist {

// One tensor of the flat model buffer: [offset, offset + count) floats.
struct TensorSpan {
  size_t offset = 0;
  size_t count = 0;
};

class ParamServer {
 public:
  // Collective over `comm`: allocates each rank's shard window. `tensors` (the same on every rank)
  // are the spans of the flat buffer that w_global holds; `num_vw` VWs push.
  ParamServer(MPI_Comm comm, std::vector<TensorSpan> tensors, int num_vw);
  ~ParamServer();  // collective (MPI_Win_free)
  ParamServer(const ParamServer&) = delete;
  ParamServer& operator=(const ParamServer&) = delete;

  // Collective: w_global = w0 (each shard's owner copies its tensors from its own `flat`, which
  // must be the same on every rank), counters = 0.
  void init(const float* flat);

  // w_global += the tensors of `delta` (a flat buffer), and VW `vw`'s pushed-wave counter += 1.
  void push(int vw, const float* delta);

  // Pushed-wave counters per VW and the w_global they describe, once every VW has pushed at least
  // `needs_waves` waves (c_global ≥ needs_waves); nullopt when not yet (nothing written to `out`).
  std::optional<std::vector<int64_t>> try_pull(int64_t needs_waves, float* out);
  // try_pull until it succeeds, sleeping between tries; `waited_s` (optional) gets the seconds spent.
  std::vector<int64_t> pull(int64_t needs_waves, float* out, double* waited_s = nullptr);

  int shards() const { return size_; }
  int shard_of(int tensor) const { return tensor % size_; }
  int num_vw() const { return num_vw_; }

 private:
  // Counters of every shard read in shared epochs (and, with `out`, the data in the same epochs).
  std::vector<std::vector<int64_t>> read_shards(float* out);
  MPI_Aint data_disp() const { return static_cast<MPI_Aint>(num_vw_ * sizeof(int64_t)); }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1, num_vw_ = 1;
  std::vector<TensorSpan> tensors_;
  std::vector<size_t> shard_offset_;  // tensor i's first float within its shard
  std::vector<size_t> shard_floats_;  // floats per shard
  std::vector<std::vector<float>> staging_;  // per shard: the packed ũ / pulled data
  MPI_Win win_ = MPI_WIN_NULL;
  void* base_ = nullptr;
};

}  // namespace baton::dist
