// A pseudo-random permutation of [0, n) that is a pure function of (n, key): π(i) is computed on
// its own in O(1) time and memory, with nothing materialised or cached, so any thread, rank or
// resumed run can ask for any position of any epoch's shuffle. Used for epoch shuffles (one key
// per (seed, epoch)).
//
// Construction: a balanced Feistel network over 2·h bits (2^(2h) >= n, h >= 1) whose round
// functions are baton::mix hashes of (key, round, half) — a bijection of [0, 2^(2h)) for any round
// functions (Luby & Rackoff 1988) — restricted to [0, n) by cycle walking (Black & Rogaway 2002,
// "Ciphers with Arbitrary Finite Domains" §3): re-encrypt until the value lands below n. Since
// 2^(2h) < 4n, that takes fewer than 4 rounds of the network on average.
#pragma once
#include <cstdint>

namespace baton {

class Permutation {
 public:
  // n >= 1.
  Permutation(int64_t n, uint64_t key);
  int64_t size() const { return n_; }
  // π(i) for i in [0, n).
  int64_t operator()(int64_t i) const;

 private:
  uint64_t network(uint64_t x) const;
  int64_t n_;
  uint64_t key_;
  int half_bits_;
  uint64_t half_mask_;
};

}  // namespace baton
