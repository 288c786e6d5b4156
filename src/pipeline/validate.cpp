// Validation pass; the invariants are listed in validate.h. The checks read only the instructions
// and Program's layout, never the generator, so a generator bug cannot hide behind itself.
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

}  // namespace

std::vector<std::string> validate(const Program& p, size_t max_problems) {
  std::vector<std::string> problems;
  auto bad = [&](int r, int i, const Instr* in, const std::string& msg) {
    if (problems.size() >= max_problems) return;
    if (in)
      problems.push_back(fmt::format("rank {} instr {} `{}`: {}", r, i, to_text(*in), msg));
    else
      problems.push_back(msg);
  };
  const ScheduleSpec& spec = p.spec;
  const int S = p.num_stages();
  const int N = p.total_microbatches();
  const int m = spec.microbatches;
  const ScheduleTraits& traits = p.traits();
  const bool flush = traits.synchronous();
  const bool two_bw = traits.update == UpdateRule::PER_BATCH;  // 2bw; 1F1B* keeps 2BW's versions
  const bool per_microbatch = traits.update == UpdateRule::PER_MICROBATCH;  // pipedream
  if (static_cast<int>(p.ranks.size()) != p.num_ranks()) {
    bad(-1, -1, nullptr,
        fmt::format("program has {} ranks, its layout {}", p.ranks.size(), p.num_ranks()));
    return problems;
  }

  std::map<std::pair<int, int>, MbState> mbs;                    // (stage, microbatch)
  std::map<std::tuple<int, int, int>, Endpoint> sends, recvs;    // (is_grad, recv stage, mb)
  std::map<int, int> input_version;                              // mb -> version read on stage 0
  std::map<int, std::vector<std::pair<int, int>>> tied_counts;   // replica -> (rank, REDUCE_TIEDs)

  for (int r = 0; r < p.num_ranks(); ++r) {
    const std::vector<int> my_stages = p.stages_of(r);
    std::map<int, std::pair<int, int>> owner;  // slot -> (stage, microbatch)
    std::map<int, int> latest, updates;        // stage -> latest version, OPT_STEPs seen
    bool reduced = false;                      // REDUCE_GRADS since the last OPT_STEP
    int tied_reductions = 0, opt_steps = 0;
    int tied_stage = -1;                       // the rank's first stage in p.tied_stages
    for (int s : my_stages)
      if (tied_stage < 0 && std::count(p.tied_stages.begin(), p.tied_stages.end(), s)) tied_stage = s;
    std::map<int, std::multiset<int>> in_flight;  // stage -> versions of in-flight microbatches
    auto live_versions = [&](int stage) {
      std::set<int> v(in_flight[stage].begin(), in_flight[stage].end());
      v.insert(latest[stage]);
      return v.size();
    };

    for (int i = 0; i < static_cast<int>(p.ranks[r].size()); ++i) {
      const Instr& in = p.ranks[r][i];
      auto fail = [&](const std::string& msg) { bad(r, i, &in, msg); };
      if (in.stage < 0 || in.stage >= S) {
        fail(fmt::format("stage out of range 0..{}", S - 1));
        continue;
      }
      if (is_update(in.op)) {
        if (!p.lowered) fail("update ops belong to lowered programs");
        if (!std::count(my_stages.begin(), my_stages.end(), in.stage))
          fail("stage is not on this rank");
        if (in.op == Op::REDUCE_TIED) {
          if (tied_stage < 0) fail("REDUCE_TIED on a rank without a tied stage");
          else if (in.stage != tied_stage)
            fail(fmt::format("REDUCE_TIED names the rank's first tied stage, {}", tied_stage));
          ++tied_reductions;
          continue;
        }
        // An update covers every stage of the rank; it names the rank's first.
        if (in.stage != my_stages.front())
          fail(fmt::format("an update names the rank's first stage, {}", my_stages.front()));
        if (in.op == Op::REDUCE_GRADS) {
          reduced = true;
          continue;
        }
        if (!reduced) fail("OPT_STEP without a REDUCE_GRADS before it");
        reduced = false;
        if (tied_stage >= 0 && tied_reductions != ++opt_steps)
          fail("OPT_STEP without a REDUCE_TIED before it on a rank with a tied stage");
        const int s0 = my_stages.front();
        if (in.weight_version != latest[s0] + 1)
          fail(fmt::format("OPT_STEP must produce version {}", latest[s0] + 1));
        for (int s : my_stages) {
          latest[s] = in.weight_version;
          ++updates[s];
          if (flush && !in_flight[s].empty())
            fail(fmt::format("optimizer step with {} microbatches of stage {} in flight: a flush "
                             "schedule updates only after the flush",
                             in_flight[s].size(), s));
          if (two_bw && live_versions(s) > 2)
            fail(fmt::format("2bw keeps at most two weight versions, {} live here", live_versions(s)));
        }
        continue;
      }
      if (in.microbatch < 0 || in.microbatch >= N) {
        fail(fmt::format("microbatch out of range 0..{}", N - 1));
        continue;
      }
      if (p.rank_of(in.stage, in.microbatch) != r) {
        fail(fmt::format("(stage {}, microbatch {}) belongs to rank {}", in.stage, in.microbatch,
                         p.rank_of(in.stage, in.microbatch)));
        continue;
      }
      if (is_comm(in.op) && !p.lowered) {
        fail("communication in a program not marked lowered");
        continue;
      }
      const std::pair key{in.stage, in.microbatch};
      MbState& st = mbs[key];
      auto take_slot = [&] {
        if (in.slot < 0) return fail("needs an activation slot");
        auto it = owner.find(in.slot);
        if (it != owner.end() && it->second != key)
          return fail(fmt::format("overwrites slot {} while it holds (stage {}, microbatch {})",
                                  in.slot, it->second.first, it->second.second));
        if (st.slot >= 0 && st.slot != in.slot)
          return fail(fmt::format("slot {} differs from the slot {} received into", in.slot, st.slot));
        owner[in.slot] = key;
        st.slot = in.slot;
      };
      auto use_slot = [&] {
        auto it = owner.find(in.slot);
        if (in.slot != st.slot || it == owner.end() || it->second != key)
          fail(fmt::format("slot {} does not hold this microbatch (its slot is {})", in.slot, st.slot));
      };
      auto check_peer = [&](int neighbour_stage) {
        const int want = p.rank_of(neighbour_stage, in.microbatch);
        if (in.peer != want) fail(fmt::format("peer must be rank {}", want));
      };
      auto check_backward_version = [&] {
        if (in.weight_version != st.version)
          fail(fmt::format("reads weight version {} but its forward read {} (weight stashing)",
                           in.weight_version, st.version));
      };

      switch (in.op) {
        case Op::LOAD:
          if (in.stage != 0 && in.stage != S - 1) fail("only the first and the last stage load data");
          if (st.load || st.fwd) fail("LOAD must come once, before the FWD");
          take_slot();
          st.load = true;
          break;
        case Op::RECV_ACT:
          if (in.stage == 0) fail("the first stage receives no activations");
          if (st.recv_act || st.fwd || st.load) fail("RECV_ACT must come once, before the LOAD and FWD");
          take_slot();
          check_peer(in.stage - 1);
          recvs[{0, in.stage, in.microbatch}] = {r, in.peer};
          st.recv_act = true;
          break;
        case Op::FWD: {
          if (st.fwd) fail("second FWD of this microbatch");
          if (p.lowered && in.stage > 0 && !st.recv_act) fail("FWD before its RECV_ACT");
          if (p.lowered && (in.stage == 0 || in.stage == S - 1) && !st.load) fail("FWD before its LOAD");
          take_slot();
          st.fwd = true;
          st.version = in.weight_version;
          in_flight[in.stage].insert(in.weight_version);
          if (in.stage == 0) input_version[in.microbatch] = in.weight_version;
          if (!p.lowered) break;
          const int v = in.weight_version;
          const int have = latest[in.stage];
          if (v < 0 || v > have)
            fail(fmt::format("reads weight version {}, but only 0..{} exist", v, have));
          else if (flush && v != have)
            fail(fmt::format("a flush schedule reads the latest version {}", have));
          else if (per_microbatch && !spec.vertical_sync && v != have)
            fail(fmt::format("pipedream's forward reads the latest version {}", have));
          else if (per_microbatch && spec.vertical_sync) {
            auto it = input_version.find(in.microbatch);
            if (it == input_version.end() || it->second != v)
              fail("vertical sync: must read the version the input stage read for this microbatch");
          } else if (two_bw) {
            const int want = std::max(in.microbatch / m - 1, 0);
            if (v != want)
              fail(fmt::format("2bw microbatch {} must read version max(⌊{}/{}⌋ − 1, 0) = {}",
                               in.microbatch, in.microbatch, m, want));
            if (live_versions(in.stage) > 2)
              fail(fmt::format("2bw keeps at most two weight versions, {} live here",
                               live_versions(in.stage)));
          }
          break;
        }
        case Op::SEND_ACT:
          if (in.stage == S - 1) fail("the last stage sends no activations");
          if (!st.fwd || st.send_act) fail("SEND_ACT must come once, after the FWD");
          use_slot();
          check_peer(in.stage + 1);
          sends[{0, in.stage + 1, in.microbatch}] = {r, in.peer};
          st.send_act = true;
          break;
        case Op::RECV_GRAD:
          if (in.stage == S - 1) fail("the last stage receives no gradient");
          if (!st.fwd || st.recv_grad || st.bwd || st.bwd_input)
            fail("RECV_GRAD must come once, after the FWD and before the backward");
          use_slot();
          check_peer(in.stage + 1);
          recvs[{1, in.stage, in.microbatch}] = {r, in.peer};
          st.recv_grad = true;
          break;
        case Op::BWD:
        case Op::BWD_INPUT:
          if (!st.fwd) fail("backward before its forward");
          if (st.bwd || st.bwd_input) fail("second backward of this microbatch");
          if (p.lowered && in.stage < S - 1 && !st.recv_grad) fail("backward before its RECV_GRAD");
          use_slot();
          check_backward_version();
          (in.op == Op::BWD ? st.bwd : st.bwd_input) = true;
          break;
        case Op::BWD_WEIGHT:
          if (!st.bwd_input || st.bwd_weight) fail("BWD_WEIGHT must come once, after BWD_INPUT");
          use_slot();
          check_backward_version();
          st.bwd_weight = true;
          break;
        case Op::SEND_GRAD:
          if (in.stage == 0) fail("the first stage sends no input gradient");
          if (!(st.bwd || st.bwd_input) || st.send_grad)
            fail("SEND_GRAD must come once, after the backward");
          use_slot();
          check_peer(in.stage - 1);
          sends[{1, in.stage - 1, in.microbatch}] = {r, in.peer};
          st.send_grad = true;
          break;
        default:
          break;
      }
      // Release the slot once nothing of this microbatch on this stage needs it any more.
      const bool sent = !p.lowered || in.stage == 0 || st.send_grad;
      if (st.backward_done() && sent && owner.count(st.slot) && owner[st.slot] == key) {
        owner.erase(st.slot);
        auto it = in_flight[in.stage].find(st.version);
        if (it != in_flight[in.stage].end()) in_flight[in.stage].erase(it);
      }
    }

    if (p.lowered && tied_stage >= 0)
      tied_counts[r - p.first_rank(my_stages.front())].push_back({r, tied_reductions});
    if (p.lowered) {
      for (int s : my_stages) {
        int want = flush || two_bw ? spec.steps : 0;
        if (per_microbatch)
          for (int k = 0; k < N; ++k) want += p.rank_of(s, k) == r;
        if (updates[s] != want)
          bad(r, -1, nullptr,
              fmt::format("rank {} stage {}: {} optimizer steps, expected {}", r, s, updates[s], want));
      }
    }
  }

  // REDUCE_TIED is a collective of the ranks holding tied stages (replica j with replica j).
  for (const auto& [replica, counts] : tied_counts)
    for (const auto& [rank, n] : counts)
      if (n != counts.front().second)
        bad(-1, -1, nullptr,
            fmt::format("rank {} reduces tied gradients {} times, rank {} {} times", rank, n,
                        counts.front().first, counts.front().second));
  for (int s = 0; s < S; ++s)
    for (int k = 0; k < N; ++k) {
      auto it = mbs.find({s, k});
      const MbState st = it == mbs.end() ? MbState{} : it->second;
      if (!st.fwd || !(st.bwd || (st.bwd_input && st.bwd_weight)))
        bad(-1, -1, nullptr,
            fmt::format("stage {} microbatch {}: forward or backward missing", s, k));
      else if (p.lowered && st.load != (s == 0 || s == S - 1))
        bad(-1, -1, nullptr, fmt::format("stage {} microbatch {}: a LOAD is missing or misplaced", s, k));
      else if (p.lowered && (st.recv_act != (s > 0) || st.send_act != (s < S - 1) ||
                             st.recv_grad != (s < S - 1) || st.send_grad != (s > 0)))
        bad(-1, -1, nullptr,
            fmt::format("stage {} microbatch {}: a send or receive is missing", s, k));
    }
  auto kind_name = [](int is_grad) { return is_grad ? "gradient" : "activation"; };
  for (const auto& [key, snd] : sends) {
    auto it = recvs.find(key);
    const auto& [is_grad, stage, mb] = key;
    if (it == recvs.end())
      bad(-1, -1, nullptr,
          fmt::format("{} of microbatch {} for stage {} is sent by rank {} but never received",
                      kind_name(is_grad), mb, stage, snd.rank));
    else if (it->second.rank != snd.peer || it->second.peer != snd.rank)
      bad(-1, -1, nullptr,
          fmt::format("{} of microbatch {} for stage {}: rank {} sends to {}, rank {} receives "
                      "from {}",
                      kind_name(is_grad), mb, stage, snd.rank, snd.peer, it->second.rank,
                      it->second.peer));
  }
  for (const auto& [key, rcv] : recvs)
    if (!sends.count(key)) {
      const auto& [is_grad, stage, mb] = key;
      bad(-1, -1, nullptr,
          fmt::format("rank {} receives the {} of microbatch {} for stage {}, which nobody sends",
                      rcv.rank, kind_name(is_grad), mb, stage));
    }
  return problems;
}

void check_valid(const Program& p) {
  const auto problems = validate(p, 5);
  if (problems.empty()) return;
  throw Error(fmt::format("invalid {} pipeline program: {}", p.spec.kind, fmt::join(problems, "; ")),
              "this is a bug in the schedule generator or in a hand-written program");
}

}  // namespace baton::pipeline
