// OpTimedBackend (the op-time table, BATON_OP_TIMES=1): a decorator must change nothing — the same
// bits as the backend it wraps, its fused ops included (a missed override would fall back to the
// Backend's default composition, e.g. matmul_gelu_forward as matmul + gelu, and be timed wrong) —
// and count each op's calls and FLOPs as its header says.
#include "backend/op_timed_backend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "model/gpt_dims.h"
#include "optim/adamw.h"

namespace baton {
namespace {

GptDims tiny_dims() { return make_gpt_dims(2, 2, 16, 8, 37); }

// Three AdamW steps of a tiny GPT on `be`: the losses and the final parameters.
std::vector<float> train(Backend& be, std::vector<double>* losses) {
  const GptDims d = tiny_dims();
  SequentialModel m(make_gpt(d), be);
  m.init_weights(3);
  const int B = 2, T = 8;
  m.reserve(B, T, 1);
  Rng rng(5);
  std::vector<int32_t> x(B * T), y(B * T);
  for (auto& t : x) t = static_cast<int32_t>(rng.below(d.vocab));
  for (auto& t : y) t = static_cast<int32_t>(rng.below(d.vocab));
  AdamW opt(be, m.table(), OptimConfig{});
  for (int step = 1; step <= 3; ++step) {
    m.zero_grads();
    losses->push_back(m.forward(0, MicroBatch{.B = B, .T = T, .tokens = x.data(), .targets = y.data()}, true,
                                1.0f / (B * T)));
    m.backward(0);
    opt.step(m.params(), m.grads(), 1e-3, 1.0f, step);
  }
  std::vector<float> p(m.params(), m.params() + m.table().total());
  return p;
}

TEST(OpTimedBackend, ChangesNoBitOfTraining) {
  for (DType act : {DType::F32, DType::BF16}) {
    auto plain = make_cpu_backend(act);
    OpTimedBackend timed(make_cpu_backend(act));
    std::vector<double> la, lb;
    const std::vector<float> a = train(*plain, &la), b = train(timed, &lb);
    EXPECT_EQ(la, lb) << dtype_name(act);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << dtype_name(act) << " parameter " << i;
    EXPECT_EQ(timed.name(), plain->name());
    EXPECT_EQ(&timed.unwrapped(), &timed.unwrapped().unwrapped());
  }
}

TEST(OpTimedBackend, CountsCallsFlopsAndBytes) {
  OpTimedBackend be(make_cpu_backend());
  const int N = 6, C = 5, OC = 7;
  std::vector<float> inp(N * C, 0.5f), w(OC * C, 0.25f), out(N * OC), pre(N * OC), dw(OC * C), dinp(N * C);
  be.matmul_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
  be.matmul_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
  be.matmul_gelu_forward(pre.data(), out.data(), inp.data(), w.data(), nullptr, N, C, OC);
  be.matmul_backward(nullptr, dw.data(), nullptr, out.data(), inp.data(), w.data(), N, C, OC, false, true);
  be.matmul_backward(dinp.data(), dw.data(), nullptr, out.data(), inp.data(), w.data(), N, C, OC, false, true);
  be.gelu_forward(pre.data(), out.data(), N * OC);
  std::map<std::string, OpTimedBackend::Row> by;
  for (const auto& r : be.rows()) by[r.op] = r;
  ASSERT_EQ(by.size(), 4u);
  EXPECT_EQ(by["matmul_forward"].calls, 2);
  EXPECT_EQ(by["matmul_forward"].flops, 2 * 2.0 * N * C * OC);
  EXPECT_EQ(by["matmul_gelu_forward"].calls, 1);  // one op, not a matmul and a gelu
  EXPECT_EQ(by["matmul_backward"].calls, 2);
  EXPECT_EQ(by["matmul_backward"].flops, 2.0 * N * C * OC * (1 + 2));  // weight part only, then both
  EXPECT_EQ(by["gelu_forward"].flops, 0);
  EXPECT_EQ(by["gelu_forward"].bytes, 4.0 * 2 * N * OC);  // read and write fp32
  for (const auto& [op, r] : by) EXPECT_GE(r.ms, 0) << op;
  const std::string t = OpTimedBackend::table(be.rows(), 10.0, 2);
  EXPECT_NE(t.find("matmul_backward"), std::string::npos) << t;
  EXPECT_NE(t.find("rest of the step"), std::string::npos) << t;
  be.reset();
  EXPECT_TRUE(be.rows().empty());
}

TEST(OpTimedBackend, EnvironmentSwitch) {
  ::unsetenv("BATON_OP_TIMES");
  EXPECT_FALSE(op_times_requested());
  ::setenv("BATON_OP_TIMES", "0", 1);
  EXPECT_FALSE(op_times_requested());
  ::setenv("BATON_OP_TIMES", "1", 1);
  EXPECT_TRUE(op_times_requested());
  ::setenv("BATON_OP_TIMES", "yes", 1);
  EXPECT_THROW(op_times_requested(), Error);
  ::unsetenv("BATON_OP_TIMES");
}

}  // namespace
}  // namespace baton
