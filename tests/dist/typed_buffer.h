// Test helper: a host buffer of any dist::DType read and written as doubles, and the
// deterministic rank-dependent inputs the collective tests use.
//
// Inputs are small integers (|v| <= 50, U8 in [0, 50]) so that every reduction over up to 5 ranks
// is exact in every dtype, BF16 included (integers up to 256 are exact in bf16), and a reference
// computed in double must match bit for bit. I64 inputs are scaled by 2^40 to exercise the upper
// 32 bits.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dist/comm.h"

namespace baton::dist::testing {

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::BF16: return "bf16";
    case DType::U8: return "u8";
  }
  return "?";
}

inline const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "sum";
    case ReduceOp::MAX: return "max";
    case ReduceOp::MIN: return "min";
  }
  return "?";
}

inline const DType kAllDTypes[] = {DType::F32, DType::F64, DType::I32,
                                   DType::I64, DType::BF16, DType::U8};
inline const ReduceOp kAllOps[] = {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::MIN};

// Element i of rank r's input.
inline double input_value(DType t, int r, size_t i) {
  const long base = static_cast<long>((i * 7 + static_cast<size_t>(r) * 13) % 101);
  if (t == DType::U8) return static_cast<double>(base % 51);
  const double v = static_cast<double>(base - 50);
  return t == DType::I64 ? v * 1099511627776.0 : v;  // 2^40
}

inline double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::SUM: return a + b;
    case ReduceOp::MAX: return a > b ? a : b;
    case ReduceOp::MIN: return a < b ? a : b;
  }
  return 0;
}

// The reduction over ranks [0, size) of input_value(t, r, i).
inline double reduced_value(DType t, ReduceOp op, int size, size_t i) {
  double acc = input_value(t, 0, i);
  for (int r = 1; r < size; ++r) acc = combine(op, acc, input_value(t, r, i));
  return acc;
}

class TypedBuffer {
 public:
  TypedBuffer(DType t, size_t n) : t_(t), n_(n), bytes_(n * dtype_size(t)) {}
  DType dtype() const { return t_; }
  size_t size() const { return n_; }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t bytes() const { return bytes_.size(); }
  void* at(size_t i) { return bytes_.data() + i * dtype_size(t_); }

  void set(size_t i, double v) {
    unsigned char* p = bytes_.data() + i * dtype_size(t_);
    switch (t_) {
      case DType::F32: store(p, static_cast<float>(v)); break;
      case DType::F64: store(p, v); break;
      case DType::I32: store(p, static_cast<int32_t>(v)); break;
      case DType::I64: store(p, static_cast<int64_t>(v)); break;
      case DType::U8: store(p, static_cast<uint8_t>(v)); break;
      case DType::BF16: {  // exact for the small integers the tests use: truncate the float
        uint32_t u;
        float f = static_cast<float>(v);
        std::memcpy(&u, &f, 4);
        store(p, static_cast<uint16_t>(u >> 16));
        break;
      }
    }
  }

  double get(size_t i) const {
    const unsigned char* p = bytes_.data() + i * dtype_size(t_);
    switch (t_) {
      case DType::F32: return load<float>(p);
      case DType::F64: return load<double>(p);
      case DType::I32: return load<int32_t>(p);
      case DType::I64: return static_cast<double>(load<int64_t>(p));
      case DType::U8: return load<uint8_t>(p);
      case DType::BF16: {
        uint32_t u = static_cast<uint32_t>(load<uint16_t>(p)) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
      }
    }
    return 0;
  }

  // Fill element i with f(i).
  template <typename F>
  void fill(F f) {
    for (size_t i = 0; i < n_; ++i) set(i, f(i));
  }

  // Index of the first element where get(i) != f(i), or size() when all match.
  template <typename F>
  size_t first_mismatch(F f) const {
    for (size_t i = 0; i < n_; ++i)
      if (get(i) != f(i)) return i;
    return n_;
  }

 private:
  template <typename T>
  static void store(unsigned char* p, T v) { std::memcpy(p, &v, sizeof v); }
  template <typename T>
  static T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }

  DType t_;
  size_t n_;
  std::vector<unsigned char> bytes_;
};

// Buffer lengths every collective is checked at (0 included: empty calls must be legal).
inline constexpr size_t kSizes[] = {0, 1, 7, 1000, size_t{1} << 16};

// Every element of `b` equals expected(i); names the first one that does not.
template <typename F>
::testing::AssertionResult matches(const TypedBuffer& b, F expected) {
  const size_t i = b.first_mismatch(expected);
  if (i == b.size()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << i << " of " << b.size() << " is "
                                       << b.get(i) << ", expected " << expected(i);
}

}  // namespace baton::dist::testing
