// Keyed Feistel permutation with cycle walking (see permutation.h).
#include "data/permutation.h"

#include <bit>

#include "core/error.h"
#include "core/rng.h"

namespace baton {
namespace {
// Four rounds already give a pseudo-random permutation for wide halves (Luby-Rackoff); the halves
// here can be a few bits wide (small datasets), where extra rounds buy mixing for almost no time.
constexpr int kRounds = 6;
}  // namespace

Permutation::Permutation(int64_t n, uint64_t key) : n_(n), key_(key) {
  BATON_ASSERT(n >= 1, "permutation of {} items", n);
  const int bits = std::bit_width(static_cast<uint64_t>(n - 1));  // 2^bits >= n
  half_bits_ = bits < 2 ? 1 : (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t Permutation::network(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (uint64_t round = 0; round < kRounds; ++round) {
    const uint64_t next = left ^ (mix({key_, round, right}) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

int64_t Permutation::operator()(int64_t i) const {
  BATON_ASSERT(i >= 0 && i < n_, "permutation index {} outside [0, {})", i, n_);
  uint64_t x = static_cast<uint64_t>(i);
  do x = network(x);
  while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

}  // namespace baton
