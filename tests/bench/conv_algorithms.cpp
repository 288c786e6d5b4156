// Benchmark, not a test: each 3×3 stride-1 convolution shape of the fashion ResNet (ResNet-18 of
// width 1/4 at 28 px, batch 250), of ResNet-18 at width 1 (batch 64) and of ResNet-50 at 224 px
// (batch 8) through the CPU backend's oneDNN path (cpu_cnn.h: cached primitives, NHWC activations,
// staged reorders included) under BATON_CPU_CONV=direct, =winograd and =auto — the measurement
// behind the rule of "auto" (src/backend/cpu/cpu_cnn.cpp ConvChoice, docs/benchmarks.md
// "Convolutions").
// Milliseconds per call of forward, backward-data and backward-weights, each the best of 5 timings.
//   OMP_NUM_THREADS=2 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/tests/bench_conv_algorithms
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/cpu_cnn.h"

namespace {

struct Times {
  double fwd, bwd_data, bwd_weights;
  double sum() const { return fwd + bwd_data + bwd_weights; }
};

template <typename F>
double best_ms(F&& f) {
  f();
  double best = 1e300;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

Times time_conv(const baton::Conv2d& c, const char* knob, std::string& kernel) {
  setenv("BATON_CPU_CONV", knob, 1);
  baton::CpuCnn cnn;  // reads the knob
  kernel = cnn.conv2d_kernel(c);
  const size_t nx = size_t(c.N) * c.C * c.H * c.W, ny = size_t(c.N) * c.K * c.P() * c.Q(),
               nw = size_t(c.K) * c.C * c.R * c.S;
  std::vector<float> x(nx, 0.01f), y(ny), dy(ny, 0.02f), dx(nx), w(nw, 0.03f), dw(nw), db(size_t(c.K));
  Times t{};
  t.fwd = best_ms([&] { cnn.conv2d_forward(y.data(), x.data(), w.data(), nullptr, c); });
  t.bwd_data = best_ms([&] { cnn.conv2d_backward(dx.data(), nullptr, nullptr, dy.data(), x.data(), w.data(), c); });
  t.bwd_weights =
      best_ms([&] { cnn.conv2d_backward(nullptr, dw.data(), db.data(), dy.data(), x.data(), w.data(), c); });
  unsetenv("BATON_CPU_CONV");
  return t;
}

}  // namespace

int main() {
  struct Case {
    const char* net;
    int N, C, H, K;
  };
  const Case cases[] = {
      {"fashion", 250, 16, 28, 16},   {"fashion", 250, 32, 14, 32},    {"fashion", 250, 64, 7, 64},
      {"fashion", 250, 128, 4, 128},  {"resnet18", 64, 64, 28, 64},    {"resnet18", 64, 128, 14, 128},
      {"resnet18", 64, 256, 7, 256},  {"resnet18", 64, 512, 4, 512},   {"resnet50", 8, 64, 56, 64},
      {"resnet50", 8, 128, 28, 128},  {"resnet50", 8, 256, 14, 256},   {"resnet50", 8, 512, 7, 512},
  };
  std::printf("%-9s %4s %4s %3s %4s | %-23s | %-23s | %-23s | %s\n", "network", "N", "C", "px", "K",
              "direct: fwd bwd_d bwd_w", "winograd", "auto", "direct / auto (auto's kernel)");
  for (const Case& k : cases) {
    const baton::Conv2d c{.N = k.N, .C = k.C, .H = k.H, .W = k.H, .K = k.K, .R = 3, .S = 3, .stride = 1, .pad = 1};
    std::string kd, kw, ka;
    const Times d = time_conv(c, "direct", kd), w = time_conv(c, "winograd", kw), a = time_conv(c, "auto", ka);
    std::printf("%-9s %4d %4d %3d %4d | %6.2f %6.2f %6.2f ms | %6.2f %6.2f %6.2f ms | %6.2f %6.2f %6.2f ms | %.2f× (%s)\n",
                k.net, k.N, k.C, k.H, k.K, d.fwd, d.bwd_data, d.bwd_weights, w.fwd, w.bwd_data, w.bwd_weights, a.fwd,
                a.bwd_data, a.bwd_weights, d.sum() / a.sum(), ka.c_str());
  }
  return 0;
}
