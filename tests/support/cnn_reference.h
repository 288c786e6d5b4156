// A naive double-precision forward of torchvision's ResNets and VGGs, written apart from
// src/model from the torchvision definitions, for checking baton's CNNs: its loss against baton's
// forward, and its directional derivatives (central differences in double, where a step of 1e-6
// crosses almost no ReLU kink) against baton's backward. Parameters come by torchvision name.
// Training mode: batch norm with the batch's statistics; dropout with core/dropout_mask.h's masks
// keyed as model/linear_layer.h documents (the batch's seed mixed with the layer's global index).
#pragma once
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/dropout_mask.h"
#include "core/rng.h"

namespace baton::reference {

using D = std::vector<double>;
using Params = std::function<const D&(const std::string&)>;

struct Act {
  D v;
  int N, C, H, W;
  double& at(int n, int c, int h, int w) { return v[((size_t(n) * C + c) * H + h) * W + w]; }
  double at(int n, int c, int h, int w) const { return v[((size_t(n) * C + c) * H + h) * W + w]; }
};

inline Act conv(const Act& x, const D& w, const D* b, int K, int R, int stride, int pad) {
  const int P = (x.H + 2 * pad - R) / stride + 1, Q = (x.W + 2 * pad - R) / stride + 1;
  Act y{D(size_t(x.N) * K * P * Q), x.N, K, P, Q};
  for (int n = 0; n < x.N; ++n)
    for (int k = 0; k < K; ++k)
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q) {
          double s = b ? (*b)[k] : 0.0;
          for (int c = 0; c < x.C; ++c)
            for (int r = 0; r < R; ++r)
              for (int t = 0; t < R; ++t) {
                const int h = p * stride - pad + r, ww = q * stride - pad + t;
                if (h >= 0 && h < x.H && ww >= 0 && ww < x.W)
                  s += x.at(n, c, h, ww) * w[((size_t(k) * x.C + c) * R + r) * R + t];
              }
          y.at(n, k, p, q) = s;
        }
  return y;
}

inline Act batch_norm(const Act& x, const D& gamma, const D& beta) {
  Act y = x;
  const double cnt = double(x.N) * x.H * x.W;
  for (int c = 0; c < x.C; ++c) {
    double mean = 0, var = 0;
    for (int n = 0; n < x.N; ++n)
      for (int h = 0; h < x.H; ++h)
        for (int w = 0; w < x.W; ++w) mean += x.at(n, c, h, w);
    mean /= cnt;
    for (int n = 0; n < x.N; ++n)
      for (int h = 0; h < x.H; ++h)
        for (int w = 0; w < x.W; ++w) var += std::pow(x.at(n, c, h, w) - mean, 2);
    var /= cnt;
    for (int n = 0; n < x.N; ++n)
      for (int h = 0; h < x.H; ++h)
        for (int w = 0; w < x.W; ++w)
          y.at(n, c, h, w) = (x.at(n, c, h, w) - mean) / std::sqrt(var + 1e-5) * gamma[c] + beta[c];
  }
  return y;
}

inline Act relu(Act x) {
  for (double& v : x.v) v = std::max(v, 0.0);
  return x;
}

inline Act add(Act a, const Act& b) {
  for (size_t i = 0; i < a.v.size(); ++i) a.v[i] += b.v[i];
  return a;
}

inline Act max_pool(const Act& x, int R, int stride, int pad) {
  const int P = (x.H + 2 * pad - R) / stride + 1, Q = (x.W + 2 * pad - R) / stride + 1;
  Act y{D(size_t(x.N) * x.C * P * Q), x.N, x.C, P, Q};
  for (int n = 0; n < x.N; ++n)
    for (int c = 0; c < x.C; ++c)
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q) {
          double m = -std::numeric_limits<double>::infinity();
          for (int r = 0; r < R; ++r)
            for (int t = 0; t < R; ++t) {
              const int h = p * stride - pad + r, w = q * stride - pad + t;
              if (h >= 0 && h < x.H && w >= 0 && w < x.W) m = std::max(m, x.at(n, c, h, w));
            }
          y.at(n, c, p, q) = m;
        }
  return y;
}

// [N, C·H·W] (flatten) or the global average [N, C].
inline Act flatten(const Act& x) { return Act{x.v, x.N, x.C * x.H * x.W, 1, 1}; }
inline Act global_avg(const Act& x) {
  Act y{D(size_t(x.N) * x.C), x.N, x.C, 1, 1};
  for (int n = 0; n < x.N; ++n)
    for (int c = 0; c < x.C; ++c) {
      double s = 0;
      for (int h = 0; h < x.H; ++h)
        for (int w = 0; w < x.W; ++w) s += x.at(n, c, h, w);
      y.at(n, c, 0, 0) = s / (x.H * x.W);
    }
  return y;
}

inline Act linear(const Act& x, const D& w, const D& b, int out) {
  Act y{D(size_t(x.N) * out), x.N, out, 1, 1};
  for (int n = 0; n < x.N; ++n)
    for (int o = 0; o < out; ++o) {
      double s = b[o];
      for (int i = 0; i < x.C; ++i) s += w[size_t(o) * x.C + i] * x.v[size_t(n) * x.C + i];
      y.v[size_t(n) * out + o] = s;
    }
  return y;
}

inline Act dropout(Act x, float p, uint64_t seed, int row0) {
  const size_t row = x.v.size() / x.N;
  const uint32_t threshold = dropout_threshold(p);
  for (int n = 0; n < x.N; ++n)
    for (size_t j = 0; j < row; ++j) {
      double& v = x.v[n * row + j];
      v = dropout_keep(seed, uint64_t(row0 + n), j, threshold) ? v / (1.0 - double(p)) : 0.0;
    }
  return x;
}

// Sum over samples of −log softmax(logits)[target].
inline double cross_entropy_sum(const Act& logits, const std::vector<int32_t>& y) {
  double sum = 0;
  for (int n = 0; n < logits.N; ++n) {
    const double* l = logits.v.data() + size_t(n) * logits.C;
    double m = l[0], s = 0;
    for (int j = 0; j < logits.C; ++j) m = std::max(m, l[j]);
    for (int j = 0; j < logits.C; ++j) s += std::exp(l[j] - m);
    sum += std::log(s) + m - l[y[n]];
  }
  return sum;
}

inline Act conv_bn(const Act& x, const Params& P, const std::string& conv_name, const std::string& bn, int K, int R,
                   int stride, bool relu_after) {
  Act z = batch_norm(conv(x, P(conv_name + ".weight"), nullptr, K, R, stride, R / 2), P(bn + ".weight"),
                     P(bn + ".bias"));
  return relu_after ? relu(z) : z;
}

// torchvision's ResNet (v1.5 bottlenecks), stem 3×3/1 without max pool below 64 pixels; channel
// counts given (width already applied).
inline double resnet_loss_sum(const Act& x, const std::vector<int32_t>& y, const Params& P,
                              const std::vector<int>& blocks, bool bottleneck, const std::vector<int>& planes,
                              int stem_channels, int classes) {
  const bool small = x.H < 64;
  Act a = batch_norm(conv(x, P("conv1.weight"), nullptr, stem_channels, small ? 3 : 7, small ? 1 : 2, small ? 1 : 3),
                     P("bn1.weight"), P("bn1.bias"));
  a = relu(a);
  if (!small) a = max_pool(a, 3, 2, 1);
  for (size_t s = 0; s < blocks.size(); ++s)
    for (int i = 0; i < blocks[s]; ++i) {
      const std::string n = "layer" + std::to_string(s + 1) + "." + std::to_string(i);
      const int stride = (s > 0 && i == 0) ? 2 : 1, pl = planes[s], out = bottleneck ? 4 * pl : pl;
      Act h;
      if (bottleneck) {
        h = conv_bn(a, P, n + ".conv1", n + ".bn1", pl, 1, 1, true);
        h = conv_bn(h, P, n + ".conv2", n + ".bn2", pl, 3, stride, true);
        h = conv_bn(h, P, n + ".conv3", n + ".bn3", out, 1, 1, false);
      } else {
        h = conv_bn(a, P, n + ".conv1", n + ".bn1", pl, 3, stride, true);
        h = conv_bn(h, P, n + ".conv2", n + ".bn2", pl, 3, 1, false);
      }
      const Act sc = (stride != 1 || a.C != out)
                         ? conv_bn(a, P, n + ".downsample.0", n + ".downsample.1", out, 1, stride, false)
                         : a;
      a = relu(add(h, sc));
    }
  return cross_entropy_sum(linear(global_avg(a), P("fc.weight"), P("fc.bias"), classes), y);
}

// torchvision's VGG: cfg channels (0 = 2×2 max pool), conv bias, optional batch norm, then
// Linear-ReLU-Dropout ×2 and Linear. `layers_before_fc`: global index of fc6 (the dropout stream).
inline double vgg_loss_sum(const Act& x, const std::vector<int32_t>& y, const Params& P, const std::vector<int>& cfg,
                           bool bn, int hidden, int classes, float p, uint64_t batch_seed, int row0,
                           int layers_before_fc) {
  Act a = x;
  int idx = 0;
  for (int v : cfg) {
    if (v == 0) {
      a = max_pool(a, 2, 2, 0);
      idx += 1;
      continue;
    }
    const std::string c = "features." + std::to_string(idx);
    a = conv(a, P(c + ".weight"), &P(c + ".bias"), v, 3, 1, 1);
    if (bn) a = batch_norm(a, P("features." + std::to_string(idx + 1) + ".weight"),
                           P("features." + std::to_string(idx + 1) + ".bias"));
    a = relu(a);
    idx += bn ? 3 : 2;
  }
  a = flatten(a);
  for (int l = 0; l < 2; ++l) {
    const std::string n = "classifier." + std::to_string(3 * l);
    a = relu(linear(a, P(n + ".weight"), P(n + ".bias"), hidden));
    if (p > 0) a = dropout(a, p, mix({batch_seed, uint64_t(layers_before_fc + l)}), row0);
  }
  return cross_entropy_sum(linear(a, P("classifier.6.weight"), P("classifier.6.bias"), classes), y);
}

}  // namespace baton::reference
