// Validation pass; the invariants are listed in validate.h. The checks read only the instructions
// and Program's layout, never the generator, so a generator bug cannot hide behind itself.
// One Validator walks every rank's list; each kind of instruction has its own small check.
#include "pipeline/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "pipeline/schedules.h"
#include "pipeline/text.h"

namespace baton::pipeline {

namespace {

// What has happened to one (stage, microbatch) so far.
struct MbState {
  bool fwd = false, bwd = false, bwd_input = false, bwd_weight = false;
  bool recv_act = false, send_act = false, recv_grad = false, send_grad = false, load = false;
  int slot = -1;
  int version = -1;
  bool backward_done() const { return bwd || bwd_weight; }
};

struct Endpoint {
  int rank, peer;
};

class Validator {
 public:
  Validator(const Program& p, size_t max_problems)
      : p_(p), max_(max_problems), traits_(p.traits()), S_(p.num_stages()), N_(p.total_microbatches()) {}

  std::vector<std::string> run() {
    if (static_cast<int>(p_.ranks.size()) != p_.num_ranks()) {
      problem(fmt::format("program has {} ranks, its layout {}", p_.ranks.size(), p_.num_ranks()));
      return problems_;
    }
    for (int r = 0; r < p_.num_ranks(); ++r) {
      begin_rank(r);
      for (int i = 0; i < static_cast<int>(p_.ranks[r].size()); ++i) check(i, p_.ranks[r][i]);
      end_rank();
    }
    check_tied_counts();
    check_microbatches();
    check_messages();
    return problems_;
  }

 private:
  // ---- reporting ----
  void problem(const std::string& msg) {
    if (problems_.size() < max_) problems_.push_back(msg);
  }
  void fail(const std::string& msg) {
    problem(fmt::format("rank {} instr {} `{}`: {}", r_, i_, to_text(*in_), msg));
  }

  // ---- per rank ----
  void begin_rank(int r) {
    r_ = r;
    stages_ = p_.stages_of(r);
    owner_.clear();
    latest_.clear();
    updates_.clear();
    in_flight_.clear();
    reduced_ = false;
    tied_reductions_ = opt_steps_ = 0;
    tied_stage_ = -1;  // the rank's first stage in p.tied_stages
    for (int s : stages_)
      if (tied_stage_ < 0 && std::count(p_.tied_stages.begin(), p_.tied_stages.end(), s)) tied_stage_ = s;
  }

  void end_rank() {
    if (!p_.lowered) return;
    if (tied_stage_ >= 0) tied_counts_[r_ - p_.first_rank(stages_.front())].push_back({r_, tied_reductions_});
    for (int s : stages_) {
      int want = traits_.update == UpdateRule::FLUSH || traits_.update == UpdateRule::PER_BATCH ? p_.spec.steps : 0;
      if (traits_.update == UpdateRule::PER_MICROBATCH)
        for (int k = 0; k < N_; ++k) want += p_.rank_of(s, k) == r_;
      if (updates_[s] != want)
        problem(fmt::format("rank {} stage {}: {} optimizer steps, expected {}", r_, s, updates_[s], want));
    }
  }

  size_t live_versions(int stage) {
    std::set<int> v(in_flight_[stage].begin(), in_flight_[stage].end());
    v.insert(latest_[stage]);
    return v.size();
  }

  void check(int i, const Instr& in) {
    i_ = i;
    in_ = &in;
    if (in.stage < 0 || in.stage >= S_) return fail(fmt::format("stage out of range 0..{}", S_ - 1));
    if (is_update(in.op)) return check_update(in);
    if (in.microbatch < 0 || in.microbatch >= N_)
      return fail(fmt::format("microbatch out of range 0..{}", N_ - 1));
    if (p_.rank_of(in.stage, in.microbatch) != r_)
      return fail(fmt::format("(stage {}, microbatch {}) belongs to rank {}", in.stage, in.microbatch,
                              p_.rank_of(in.stage, in.microbatch)));
    if (is_comm(in.op) && !p_.lowered) return fail("communication in a program not marked lowered");
    key_ = {in.stage, in.microbatch};
    MbState& st = mbs_[key_];
    switch (in.op) {
      case Op::LOAD: check_load(st); break;
      case Op::RECV_ACT: check_recv_act(st); break;
      case Op::FWD: check_fwd(st); break;
      case Op::SEND_ACT: check_send_act(st); break;
      case Op::RECV_GRAD: check_recv_grad(st); break;
      case Op::BWD:
      case Op::BWD_INPUT: check_backward(st); break;
      case Op::BWD_WEIGHT: check_bwd_weight(st); break;
      case Op::SEND_GRAD: check_send_grad(st); break;
      default: break;
    }
    release(st);
  }

  // ---- updates: REDUCE_TIED, REDUCE_GRADS, OPT_STEP ----
  void check_update(const Instr& in) {
    if (!p_.lowered) fail("update ops belong to lowered programs");
    if (!std::count(stages_.begin(), stages_.end(), in.stage)) fail("stage is not on this rank");
    if (in.op == Op::REDUCE_TIED) {
      if (tied_stage_ < 0) fail("REDUCE_TIED on a rank without a tied stage");
      else if (in.stage != tied_stage_)
        fail(fmt::format("REDUCE_TIED names the rank's first tied stage, {}", tied_stage_));
      ++tied_reductions_;
      return;
    }
    // An update covers every stage of the rank; it names the rank's first.
    if (in.stage != stages_.front())
      fail(fmt::format("an update names the rank's first stage, {}", stages_.front()));
    if (in.op == Op::REDUCE_GRADS) {
      reduced_ = true;
      return;
    }
    if (!reduced_) fail("OPT_STEP without a REDUCE_GRADS before it");
    reduced_ = false;
    if (tied_stage_ >= 0 && tied_reductions_ != ++opt_steps_)
      fail("OPT_STEP without a REDUCE_TIED before it on a rank with a tied stage");
    const int s0 = stages_.front();
    if (in.weight_version != latest_[s0] + 1)
      fail(fmt::format("OPT_STEP must produce version {}", latest_[s0] + 1));
    for (int s : stages_) {
      latest_[s] = in.weight_version;
      ++updates_[s];
      if (traits_.synchronous() && !in_flight_[s].empty())
        fail(fmt::format("optimizer step with {} microbatches of stage {} in flight: a flush "
                         "schedule updates only after the flush",
                         in_flight_[s].size(), s));
      if (traits_.update == UpdateRule::PER_BATCH && live_versions(s) > 2)
        fail(fmt::format("2bw keeps at most two weight versions, {} live here", live_versions(s)));
    }
  }

  // ---- slots, peers, versions ----
  void take_slot(MbState& st) {
    if (in_->slot < 0) return fail("needs an activation slot");
    auto it = owner_.find(in_->slot);
    if (it != owner_.end() && it->second != key_)
      return fail(fmt::format("overwrites slot {} while it holds (stage {}, microbatch {})", in_->slot,
                              it->second.first, it->second.second));
    if (st.slot >= 0 && st.slot != in_->slot)
      return fail(fmt::format("slot {} differs from the slot {} received into", in_->slot, st.slot));
    owner_[in_->slot] = key_;
    st.slot = in_->slot;
  }
  void use_slot(const MbState& st) {
    auto it = owner_.find(in_->slot);
    if (in_->slot != st.slot || it == owner_.end() || it->second != key_)
      fail(fmt::format("slot {} does not hold this microbatch (its slot is {})", in_->slot, st.slot));
  }
  void check_peer(int neighbour_stage) {
    const int want = p_.rank_of(neighbour_stage, in_->microbatch);
    if (in_->peer != want) fail(fmt::format("peer must be rank {}", want));
  }
  void check_backward_version(const MbState& st) {
    if (in_->weight_version != st.version)
      fail(fmt::format("reads weight version {} but its forward read {} (weight stashing)",
                       in_->weight_version, st.version));
  }
  // Release the slot once nothing of this microbatch on this stage needs it any more.
  void release(const MbState& st) {
    const bool sent = !p_.lowered || in_->stage == 0 || st.send_grad;
    if (!st.backward_done() || !sent || !owner_.count(st.slot) || owner_[st.slot] != key_) return;
    owner_.erase(st.slot);
    auto it = in_flight_[in_->stage].find(st.version);
    if (it != in_flight_[in_->stage].end()) in_flight_[in_->stage].erase(it);
  }

  // ---- one check per kind of instruction ----
  void check_load(MbState& st) {
    if (in_->stage != 0 && in_->stage != S_ - 1) fail("only the first and the last stage load data");
    if (st.load || st.fwd) fail("LOAD must come once, before the FWD");
    take_slot(st);
    st.load = true;
  }
  void check_recv_act(MbState& st) {
    if (in_->stage == 0) fail("the first stage receives no activations");
    if (st.recv_act || st.fwd || st.load) fail("RECV_ACT must come once, before the LOAD and FWD");
    take_slot(st);
    check_peer(in_->stage - 1);
    recvs_[{0, in_->stage, in_->microbatch}] = {r_, in_->peer};
    st.recv_act = true;
  }
  void check_fwd(MbState& st) {
    const Instr& in = *in_;
    if (st.fwd) fail("second FWD of this microbatch");
    if (p_.lowered && in.stage > 0 && !st.recv_act) fail("FWD before its RECV_ACT");
    if (p_.lowered && (in.stage == 0 || in.stage == S_ - 1) && !st.load) fail("FWD before its LOAD");
    take_slot(st);
    st.fwd = true;
    st.version = in.weight_version;
    in_flight_[in.stage].insert(in.weight_version);
    if (in.stage == 0) input_version_[in.microbatch] = in.weight_version;
    if (p_.lowered) check_fwd_version();
  }
  // The version a forward reads, per the kind's update rule.
  void check_fwd_version() {
    const Instr& in = *in_;
    const int v = in.weight_version, have = latest_[in.stage];
    const bool per_microbatch = traits_.update == UpdateRule::PER_MICROBATCH;  // pipedream
    if (v < 0 || v > have) {
      fail(fmt::format("reads weight version {}, but only 0..{} exist", v, have));
    } else if (traits_.synchronous() && v != have) {
      fail(fmt::format("a flush schedule reads the latest version {}", have));
    } else if (traits_.in_flight_nm) {  // hetpipe: minibatch k reads the local updates 1..k+1−Nm
      const int nm = p_.spec.nm > 0 ? p_.spec.nm : p_.spec.pp, want = std::max(in.microbatch - nm + 1, 0);
      if (v != want)
        fail(fmt::format("hetpipe microbatch {} must read version max({} − Nm + 1, 0) = {}", in.microbatch,
                         in.microbatch, want));
    } else if (per_microbatch && !p_.spec.vertical_sync && v != have) {
      fail(fmt::format("pipedream's forward reads the latest version {}", have));
    } else if (per_microbatch && p_.spec.vertical_sync) {
      auto it = input_version_.find(in.microbatch);
      if (it == input_version_.end() || it->second != v)
        fail("vertical sync: must read the version the input stage read for this microbatch");
    } else if (traits_.update == UpdateRule::PER_BATCH) {  // 2bw; 1F1B* keeps 2BW's versions
      const int m = p_.spec.microbatches, want = std::max(in.microbatch / m - 1, 0);
      if (v != want)
        fail(fmt::format("2bw microbatch {} must read version max(⌊{}/{}⌋ − 1, 0) = {}", in.microbatch,
                         in.microbatch, m, want));
      if (live_versions(in.stage) > 2)
        fail(fmt::format("2bw keeps at most two weight versions, {} live here", live_versions(in.stage)));
    }
  }
  void check_send_act(MbState& st) {
    if (in_->stage == S_ - 1) fail("the last stage sends no activations");
    if (!st.fwd || st.send_act) fail("SEND_ACT must come once, after the FWD");
    use_slot(st);
    check_peer(in_->stage + 1);
    sends_[{0, in_->stage + 1, in_->microbatch}] = {r_, in_->peer};
    st.send_act = true;
  }
  void check_recv_grad(MbState& st) {
    if (in_->stage == S_ - 1) fail("the last stage receives no gradient");
    if (!st.fwd || st.recv_grad || st.bwd || st.bwd_input)
      fail("RECV_GRAD must come once, after the FWD and before the backward");
    use_slot(st);
    check_peer(in_->stage + 1);
    recvs_[{1, in_->stage, in_->microbatch}] = {r_, in_->peer};
    st.recv_grad = true;
  }
  void check_backward(MbState& st) {
    if (!st.fwd) fail("backward before its forward");
    if (st.bwd || st.bwd_input) fail("second backward of this microbatch");
    if (p_.lowered && in_->stage < S_ - 1 && !st.recv_grad) fail("backward before its RECV_GRAD");
    use_slot(st);
    check_backward_version(st);
    (in_->op == Op::BWD ? st.bwd : st.bwd_input) = true;
  }
  void check_bwd_weight(MbState& st) {
    if (!st.bwd_input || st.bwd_weight) fail("BWD_WEIGHT must come once, after BWD_INPUT");
    use_slot(st);
    check_backward_version(st);
    st.bwd_weight = true;
  }
  void check_send_grad(MbState& st) {
    if (in_->stage == 0) fail("the first stage sends no input gradient");
    if (!(st.bwd || st.bwd_input) || st.send_grad) fail("SEND_GRAD must come once, after the backward");
    use_slot(st);
    check_peer(in_->stage - 1);
    sends_[{1, in_->stage - 1, in_->microbatch}] = {r_, in_->peer};
    st.send_grad = true;
  }

  // ---- the whole program ----
  // REDUCE_TIED is a collective of the ranks holding tied stages (replica j with replica j).
  void check_tied_counts() {
    for (const auto& [replica, counts] : tied_counts_)
      for (const auto& [rank, n] : counts)
        if (n != counts.front().second)
          problem(fmt::format("rank {} reduces tied gradients {} times, rank {} {} times", rank, n,
                              counts.front().first, counts.front().second));
  }
  void check_microbatches() {
    for (int s = 0; s < S_; ++s)
      for (int k = 0; k < N_; ++k) {
        auto it = mbs_.find({s, k});
        const MbState st = it == mbs_.end() ? MbState{} : it->second;
        if (!st.fwd || !(st.bwd || (st.bwd_input && st.bwd_weight)))
          problem(fmt::format("stage {} microbatch {}: forward or backward missing", s, k));
        else if (p_.lowered && st.load != (s == 0 || s == S_ - 1))
          problem(fmt::format("stage {} microbatch {}: a LOAD is missing or misplaced", s, k));
        else if (p_.lowered && (st.recv_act != (s > 0) || st.send_act != (s < S_ - 1) ||
                                st.recv_grad != (s < S_ - 1) || st.send_grad != (s > 0)))
          problem(fmt::format("stage {} microbatch {}: a send or receive is missing", s, k));
      }
  }
  void check_messages() {
    auto kind_name = [](int is_grad) { return is_grad ? "gradient" : "activation"; };
    for (const auto& [key, snd] : sends_) {
      auto it = recvs_.find(key);
      const auto& [is_grad, stage, mb] = key;
      if (it == recvs_.end())
        problem(fmt::format("{} of microbatch {} for stage {} is sent by rank {} but never received",
                            kind_name(is_grad), mb, stage, snd.rank));
      else if (it->second.rank != snd.peer || it->second.peer != snd.rank)
        problem(fmt::format("{} of microbatch {} for stage {}: rank {} sends to {}, rank {} receives "
                            "from {}",
                            kind_name(is_grad), mb, stage, snd.rank, snd.peer, it->second.rank,
                            it->second.peer));
    }
    for (const auto& [key, rcv] : recvs_)
      if (!sends_.count(key)) {
        const auto& [is_grad, stage, mb] = key;
        problem(fmt::format("rank {} receives the {} of microbatch {} for stage {}, which nobody sends",
                            rcv.rank, kind_name(is_grad), mb, stage));
      }
  }

  const Program& p_;
  size_t max_;
  const ScheduleTraits& traits_;
  const int S_, N_;
  std::vector<std::string> problems_;
  // Program-wide.
  std::map<std::pair<int, int>, MbState> mbs_;                   // (stage, microbatch)
  std::map<std::tuple<int, int, int>, Endpoint> sends_, recvs_;  // (is_grad, recv stage, mb)
  std::map<int, int> input_version_;                             // mb -> version read on stage 0
  std::map<int, std::vector<std::pair<int, int>>> tied_counts_;  // replica -> (rank, REDUCE_TIEDs)
  // The current rank and instruction.
  int r_ = 0, i_ = 0;
  const Instr* in_ = nullptr;
  std::pair<int, int> key_;
  std::vector<int> stages_;
  std::map<int, std::pair<int, int>> owner_;   // slot -> (stage, microbatch)
  std::map<int, int> latest_, updates_;        // stage -> latest version, OPT_STEPs seen
  std::map<int, std::multiset<int>> in_flight_;  // stage -> versions of in-flight microbatches
  bool reduced_ = false;                       // REDUCE_GRADS since the last OPT_STEP
  int tied_reductions_ = 0, opt_steps_ = 0, tied_stage_ = -1;
};

}  // namespace

std::vector<std::string> validate(const Program& p, size_t max_problems) {
  return Validator(p, max_problems).run();
}

void check_valid(const Program& p) {
  const auto problems = validate(p, 5);
  if (problems.empty()) return;
  throw Error(fmt::format("invalid {} pipeline program: {}", p.spec.kind, fmt::join(problems, "; ")),
              "this is a bug in the schedule generator or in a hand-written program");
}

}  // namespace baton::pipeline
