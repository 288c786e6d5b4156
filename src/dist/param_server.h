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
// Who pushes: a VW's wave may arrive in parts — each stage of a pipelined VW pushing its own
// tensors (hetero.placement = "local": HetPipe's ED-local, where a stage talks to the shard on its
// own node). A Selection names the tensors of a push or a pull; a shard counts, per VW, the tensors
// pushed to it, so a VW's wave is complete on shard s once all n_s tensors of s arrived for it:
// c_global on s = min over VWs of floor(counter / n_s). Every tensor must be pushed exactly once
// per VW and wave (a whole-model push, or the stages' disjoint parts).
//
// Built on passive-target one-sided MPI, so no rank runs a server loop or a progress thread:
// - every rank hosts one shard: one window holding one pushed-tensor counter per VW (int64), the
//   shard's w_global and D + 1 wave slots (fp32); tensor i lives on shard i mod (number of ranks),
//   or where the caller places it;
// - a push, per shard it touches: one exclusive epoch with MPI_Accumulate(SUM) of its tensors into
//   slot (wave mod (D+1)) and + (their number) on the VW's counter; the push that completes a wave
//   on the shard (every VW's counter now at (wave + 1)·n_s or beyond) moves that slot into w_global
//   in the same epoch;
// - a pull, per shard: one shared epoch reading the counters and the selected tensors of w_global.
//   Shards are separate epochs, so a wave may be complete on some shards and not yet on others while
//   a pull reads them; the pull is accepted only when every shard it read shows the same c_global,
//   else it re-reads;
// - a pull whose c_global does not yet allow it sleeps and retries (back-off up to 2 ms): waiting
//   never spins on a core that a co-located rank computes on.
// Invariant: a VW's parts of a wave are pushed in wave order, each tensor from one rank; every rank
// of `comm` calls the constructor, init() and the destructor (collectives), pushes and pulls are
// independent. A ParamServer is used by one thread at a time (dist/server_client.h may run it on
// a thread of its own).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace baton::dist {

// One tensor of the flat model buffer: [offset, offset + count) floats.
struct TensorSpan {
  size_t offset = 0;
  size_t count = 0;
};

class ParamServer {
 public:
  // Tensors of a push or a pull, precomputed per shard: runs of tensors adjacent within the shard.
  struct Selection {
    struct Run {
      size_t shard_offset = 0, count = 0;  // floats within the shard
      std::vector<int> tensors;            // in shard order
    };
    std::vector<std::vector<Run>> runs;  // per shard
    std::vector<int64_t> tensors;        // per shard: how many of its tensors
  };

  // Collective over `comm`: allocates each rank's shard window. `tensors` (the same on every rank)
  // are the spans of the flat buffer that w_global holds; `num_vw` VWs push; D = `staleness`.
  // `placement` puts tensor i on shard placement[i] (empty: round robin, i mod shards).
  ParamServer(MPI_Comm comm, std::vector<TensorSpan> tensors, int num_vw, int staleness,
              std::vector<int> placement = {});
  ~ParamServer();  // collective (MPI_Win_free)
  ParamServer(const ParamServer&) = delete;
  ParamServer& operator=(const ParamServer&) = delete;

  // Collective: w_global = w0 (each shard's owner copies its tensors from its own `flat`, which
  // must be the same on every rank), counters = 0.
  void init(const float* flat);

  // The selection of `tensors` (indices into the constructor's list); all() selects every tensor.
  Selection select(const std::vector<int>& tensors) const;
  const Selection& all() const { return all_; }

  // VW `vw`'s wave `wave` (its waves 0 … wave − 1 pushed before): the selected tensors of `delta`
  // (a flat buffer) are added to w_global once every VW has pushed this wave.
  void push(int vw, int64_t wave, const float* delta) { push(vw, wave, delta, all_); }
  void push(int vw, int64_t wave, const float* delta, const Selection& sel);

  // c_global (of the shards holding the selection) and the selected tensors of w_global as of it
  // (into `out`), once c_global ≥ `needs`; nullopt when not yet (nothing written to `out`).
  std::optional<int64_t> try_pull(int64_t needs, float* out) { return try_pull(needs, out, all_); }
  std::optional<int64_t> try_pull(int64_t needs, float* out, const Selection& sel);
  // try_pull until it succeeds, sleeping between tries; `waited_s` (optional) gets the seconds spent.
  int64_t pull(int64_t needs, float* out, double* waited_s = nullptr) { return pull(needs, out, all_, waited_s); }
  int64_t pull(int64_t needs, float* out, const Selection& sel, double* waited_s = nullptr);

  // What a pull of c_global >= `needs` waits for, in words (the stall watchdog's report).
  static std::string waiting_for(int64_t needs);

  // The bytes of tensors this rank moved to (push: the ũ, and a completing push's fold of the
  // wave slot, read, added and cleared) and from (pull, re-reads included) each shard — one-sided,
  // so the origin counts both ways. What the placement of the shards costs the network
  // (docs/hetpipe.md "Measured in HetPipe's regime").
  struct Traffic {
    std::vector<uint64_t> push, pull;  // per shard (= rank)
  };
  const Traffic& traffic() const { return traffic_; }

  int shards() const { return size_; }
  int shard_of(int tensor) const { return shard_of_[static_cast<size_t>(tensor)]; }
  int num_vw() const { return num_vw_; }

 private:
  // c_global of every shard the selection touches (−1 for the others) read in shared epochs (and,
  // with `data`, the selected tensors of w_global into staging_ in the same epochs).
  std::vector<int64_t> read_shards(const Selection& sel, bool data);
  MPI_Aint data_disp() const { return static_cast<MPI_Aint>(num_vw_ * sizeof(int64_t)); }
  // Byte offset of shard s's wave slot k (0 … D), after its w_global (at data_disp()).
  MPI_Aint slot_disp(int s, int k) const {
    return data_disp() + MPI_Aint((k + 1) * shard_floats_[s] * sizeof(float));
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1, num_vw_ = 1, slots_ = 1;
  std::vector<TensorSpan> tensors_;
  std::vector<int> shard_of_;
  std::vector<int64_t> shard_tensors_;  // n_s: tensors per shard
  Selection all_;
  std::vector<size_t> shard_offset_;  // tensor i's first float within its shard
  std::vector<size_t> shard_floats_;  // floats per shard
  std::vector<std::vector<float>> staging_;  // per shard: the packed ũ / pulled data
  std::vector<float> fold_;                   // a completed wave's slot on its way into w_global
  Traffic traffic_;
  MPI_Win win_ = MPI_WIN_NULL;
  void* base_ = nullptr;
};

}  // namespace baton::dist
