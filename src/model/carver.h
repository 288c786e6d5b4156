// Carver: views into one byte buffer, handed out in declaration order, each 64-byte aligned (a
// cache line; 16-byte vector loads on the GPU). Activations take act_size bytes per element (fp32
// or bf16, Backend::act_dtype), statistics are fp32. Built over a null base it only measures, so
// a layer's buffer size is the same code as its views: no size formula to keep in sync.
#pragma once
#include <cstddef>
#include <cstdint>

namespace baton {

class Carver {
 public:
  Carver(void* base, size_t act_size) : base_(static_cast<char*>(base)), act_size_(act_size) {}
  // n activations.
  void* act(size_t n) { return take(n * act_size_); }
  // n fp32 values.
  float* f32(size_t n) { return static_cast<float*>(take(n * sizeof(float))); }
  size_t used() const { return used_; }

 private:
  void* take(size_t bytes) {
    char* p = base_ ? base_ + used_ : nullptr;
    used_ += (bytes + 63) / 64 * 64;
    return p;
  }
  char* base_;
  size_t act_size_;
  size_t used_ = 0;
};

// Bytes `carve` (a callable taking a Carver&) hands out: it runs over a null base, which only
// measures — the same code that carves the views sizes their buffer.
template <class Carve>
size_t carved_bytes(size_t act_size, Carve&& carve) {
  Carver c{nullptr, act_size};
  carve(c);
  return c.used();
}

// The element `n` activations after `p` (act_size bytes each).
inline void* act_at(void* p, size_t n, size_t act_size) {
  return static_cast<char*>(p) + n * act_size;
}
inline const void* act_at(const void* p, size_t n, size_t act_size) {
  return static_cast<const char*>(p) + n * act_size;
}

}  // namespace baton
