// The parameter server's data path for WSP (HetPipe §5, digest §B.3; docs/hetpipe.md "The parameter
// server"): w_global sharded over the ranks of a communicator, pushes that add a VW's wave update
// (w_global += ũ, the paper's additive rule) and pulls that return w_global once every VW has
// pushed enough waves. The control plane (which clock a pull needs) is wsp::ServerClock's rule;
// this class moves the floats and counts the pushed waves.
//
// What a pull returns: w_global as of c_global — w0 plus exactly the waves 0 … c_global − 1 of every
// VW (ServerClock's w_global at that clock). Pushes of later waves wait in per-wave slots and are
// added to w_global when the last VW pushes that wave, so a pull never returns part of a wave and
// its content is a function of c_global alone: with D = 0 and Nm = 1 every VW pulls the same
// weights as synchronous data parallelism. A VW's own pushed waves that are not in w_global yet
// are the VW's to add (the merge rule, wsp/worker_clock.h). A VW at clock c pushes wave c ≤
// c_global + D, so D + 1 slots suffice.
//
// Built on passive-target one-sided MPI, so no rank runs a server loop or a progress thread:
// - every rank hosts one shard: one window holding one pushed-wave counter per VW (int64), the
//   shard's w_global and D + 1 wave slots (fp32); tensor i lives on shard i mod (number of ranks);
// - a push, per shard: one exclusive epoch with MPI_Accumulate(SUM) of the shard's part of ũ into
//   slot (wave mod (D+1)) and +1 on the VW's counter; the push that completes a wave (every counter
//   now beyond it) moves that slot into w_global in the same epoch;
// - a pull, per shard: one shared epoch reading the counters and w_global. Shards are separate
//   epochs, so a wave may be complete on some shards and not yet on others while a pull reads them;
//   the pull is accepted only when every shard shows the same c_global, else it re-reads;
// - a pull whose c_global does not yet allow it sleeps and retries (back-off up to 2 ms): waiting
//   never spins on a core that a co-located rank computes on.
// Invariant: a VW pushes from one rank, its waves in order; every rank of `comm` calls the
// constructor, init() and the destructor (collectives), pushes and pulls are independent.
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
  // are the spans of the flat buffer that w_global holds; `num_vw` VWs push; D = `staleness`.
  ParamServer(MPI_Comm comm, std::vector<TensorSpan> tensors, int num_vw, int staleness);
  ~ParamServer();  // collective (MPI_Win_free)
  ParamServer(const ParamServer&) = delete;
  ParamServer& operator=(const ParamServer&) = delete;

  // Collective: w_global = w0 (each shard's owner copies its tensors from its own `flat`, which
  // must be the same on every rank), counters = 0.
  void init(const float* flat);

  // VW `vw`'s wave `wave` (its waves 0 … wave − 1 pushed before): the tensors of `delta` (a flat
  // buffer) are added to w_global once every VW has pushed this wave.
  void push(int vw, int64_t wave, const float* delta);

  // c_global and w_global as of it (into `out`'s tensors), once c_global ≥ `needs`; nullopt when
  // not yet (nothing written to `out`).
  std::optional<int64_t> try_pull(int64_t needs, float* out);
  // try_pull until it succeeds, sleeping between tries; `waited_s` (optional) gets the seconds spent.
  int64_t pull(int64_t needs, float* out, double* waited_s = nullptr);

  int shards() const { return size_; }
  int shard_of(int tensor) const { return tensor % size_; }
  int num_vw() const { return num_vw_; }

 private:
  // c_global of every shard read in shared epochs (and, with `out`, w_global in the same epochs).
  std::vector<int64_t> read_shards(bool data);
  MPI_Aint data_disp() const { return static_cast<MPI_Aint>(num_vw_ * sizeof(int64_t)); }
  // Byte offset of shard s's wave slot k (0 … D), after its w_global (at data_disp()).
  MPI_Aint slot_disp(int s, int k) const {
    return data_disp() + MPI_Aint((k + 1) * shard_floats_[s] * sizeof(float));
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1, num_vw_ = 1, slots_ = 1;
  std::vector<TensorSpan> tensors_;
  std::vector<size_t> shard_offset_;  // tensor i's first float within its shard
  std::vector<size_t> shard_floats_;  // floats per shard
  std::vector<std::vector<float>> staging_;  // per shard: the packed ũ / pulled data
  std::vector<float> fold_;                   // a completed wave's slot on its way into w_global
  MPI_Win win_ = MPI_WIN_NULL;
  void* base_ = nullptr;
};

}  // namespace baton::dist
