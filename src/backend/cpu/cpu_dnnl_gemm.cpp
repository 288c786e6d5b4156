// Cached oneDNN matmul primitives; see cpu_dnnl_gemm.h.
#include "backend/cpu/cpu_dnnl_gemm.h"

#include <cstdlib>
#include <unordered_map>

#include "core/error.h"

#include <fmt/format.h>

namespace baton {

using dnnl::memory;

struct DnnlGemm::Primitive {
  dnnl::matmul p;
  memory src, wei, bias, dst, scratch;
};

namespace {

// Row-major [rows, cols] with leading dimension ld; transposed: the [cols, rows] array read as
// its transpose (oneDNN takes the strides, so no copy is made).
memory::desc mat(int rows, int cols, int ld, memory::data_type t, bool transposed) {
  return transposed ? memory::desc({rows, cols}, t, {1, ld}) : memory::desc({rows, cols}, t, {ld, 1});
}

}  // namespace

DnnlGemm::DnnlGemm() = default;
DnnlGemm::~DnnlGemm() { std::free(scratch_); }

DnnlGemm::Primitive& DnnlGemm::get(const Shape& s) {
  auto it = cache_.find(s.key());
  if (it != cache_.end()) return *it->second;
  const memory::desc a = mat(s.M, s.K, s.lda, s.a, s.trans_a), b = mat(s.K, s.N, s.ldb, s.b, s.trans_b),
                     c = mat(s.M, s.N, s.ldc, s.c, false);
  const memory::desc bias = s.bias ? memory::desc({1, s.N}, s.b, {s.N, 1}) : memory::desc();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, bias, c), attr, eng_);
  auto g = std::make_unique<Primitive>();
  g->p = dnnl::matmul(pd);
  g->src = memory(a, eng_, nullptr);
  g->wei = memory(b, eng_, nullptr);
  g->dst = memory(c, eng_, nullptr);
  if (s.bias) g->bias = memory(bias, eng_, nullptr);
  const memory::desc sd = pd.scratchpad_desc();
  if (sd.get_size() > scratch_bytes_) {
    std::free(scratch_);
    scratch_bytes_ = (sd.get_size() + 4095) / 4096 * 4096;
    scratch_ = std::aligned_alloc(4096, scratch_bytes_);
    BATON_REQUIRE(scratch_, fmt::format("out of memory for a {} byte oneDNN scratchpad", scratch_bytes_),
                  "use a smaller micro-batch");
  }
  g->scratch = memory(sd, eng_, nullptr);
  return *cache_.emplace(s.key(), std::move(g)).first->second;
}

void DnnlGemm::run(const Shape& s, const void* A, const void* B, const void* bias, void* C) {
  Primitive& g = get(s);
  g.src.set_data_handle(const_cast<void*>(A));
  g.wei.set_data_handle(const_cast<void*>(B));
  g.dst.set_data_handle(C);
  g.scratch.set_data_handle(scratch_);  // the shared buffer may have grown since g was built
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, g.src}, {DNNL_ARG_WEIGHTS, g.wei},
                                       {DNNL_ARG_DST, g.dst}, {DNNL_ARG_SCRATCHPAD, g.scratch}};
  if (s.bias) {
    g.bias.set_data_handle(const_cast<void*>(bias));
    args.insert({DNNL_ARG_BIAS, g.bias});
  }
  g.p.execute(strm_, args);
  strm_.wait();
}

}  // namespace baton
