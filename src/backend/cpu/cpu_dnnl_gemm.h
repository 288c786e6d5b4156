// DnnlGemm: C[M,N] = op(A)[M,K] . op(B)[K,N] (+ C) (+ bias[N]) through oneDNN matmul primitives,
// built once per shape and layout and cached with their memory objects (rebound to the caller's
// buffers each call); their scratchpad is one buffer grown to the largest need. Used by the fp32
// dense layers (cpu_matmul.cpp: oneDNN's brgemm kernels run the skinny products of a training step
// 8-19% faster than OpenBLAS sgemm on AVX-512; docs/benchmarks.md) and by native bf16
// (cpu_bf16_matmul.cpp). Call an object from one thread at a time (the fp32 layers keep one per
// thread): its primitives share one scratchpad.
#pragma once
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

namespace baton {

class DnnlGemm {
 public:
  using dt = dnnl::memory::data_type;
  // Row-major matrices; trans_a: A is stored [K, M] (leading dimension lda), likewise trans_b.
  struct Shape {
    dt a, b, c;
    bool trans_a, trans_b;
    int M, N, K, lda, ldb, ldc;
    bool accumulate;  // C += op(A) . op(B): the sum is formed in fp32 and rounded once on store
    bool bias;        // + bias[N] (type b)
    using Key = std::tuple<dt, dt, dt, bool, bool, int, int, int, int, int, int, bool, bool>;
    Key key() const { return {a, b, c, trans_a, trans_b, M, N, K, lda, ldb, ldc, accumulate, bias}; }
  };

  DnnlGemm();
  ~DnnlGemm();
  DnnlGemm(const DnnlGemm&) = delete;
  DnnlGemm& operator=(const DnnlGemm&) = delete;

  // Throws dnnl::error where oneDNN has no kernel for the shape (callers name the op and a way out).
  void run(const Shape& s, const void* A, const void* B, const void* bias, void* C);

 private:
  struct Primitive;
  Primitive& get(const Shape& s);
  dnnl::engine eng_{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm_{eng_};
  std::map<Shape::Key, std::unique_ptr<Primitive>> cache_;
  void* scratch_ = nullptr;  // shared by every primitive
  size_t scratch_bytes_ = 0;
};

}  // namespace baton
