// Deterministic random numbers that do not depend on the platform's <random> implementation, so
// the same seed gives the same data order and initial weights on every machine and layout.
// - mix(): counter-based hashing (splitmix64 finaliser) for "pure function of (seed, step, i)".
// - Rng: xoshiro256** stream for sequential draws (weight init, sampling).
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace baton {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Hash of an ordered list of integers; mix({seed, step, row}) is a pure function of its inputs.
inline uint64_t mix(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x6a09e667f3bcc909ULL;
  for (uint64_t p : parts) h = splitmix64(h ^ splitmix64(p));
  return h;
}

// FNV-1a of a string (stable names -> stable seeds, e.g. one init stream per parameter name).
inline uint64_t hash_string(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) { reseed(seed); }
  void reseed(uint64_t seed) {
    for (auto& w : s_) w = seed = splitmix64(seed);
  }
  uint64_t next_u64() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 24 random bits (exactly representable as float).
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Uniform integer in [0, n) (n > 0); Lemire's multiply-shift, bias < 2^-32 for our n.
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
  }
  // Standard normal by Box-Muller in double precision.
  float normal() {
    double u1 = (static_cast<double>(next_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  // Full state, for checkpoints.
  const uint64_t* state() const { return s_; }
  void set_state(const uint64_t* s) {
    for (int i = 0; i < 4; ++i) s_[i] = s[i];
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace baton
