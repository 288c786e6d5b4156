// The double-precision loss and gradient of a basic-block ResNet (torchvision's ResNet-18/34 with
// the small-image stem: 3×3/1 convolution, no max pool), in training mode, by reverse mode written
// from the definitions of tests/support/cnn_reference.h's forward — for checking baton's fp32
// gradients of a whole network at real batch sizes against fp64 (issue 25 item 1: batch norm's sums
// over N·H·W values are where fp32 loses digits). Written apart from src/model and src/backend:
// convolutions are im2col + cblas_dgemm (OpenBLAS in double; the naive loops of cnn_reference.h
// would take minutes at the fashion config's 250 images of 28 × 28), batch norm's statistics are
// two-pass sums in double. Parameters and gradients by torchvision name; every batch norm's batch
// mean and (biased) variance are kept by name too.
#pragma once
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cnn_reference.h"

namespace baton::reference {

class ResNetGrad {
 public:
  // params: every tensor by torchvision name (double copies of baton's).
  explicit ResNetGrad(std::map<std::string, D> params) : params_(std::move(params)) {}

  // The mean cross-entropy over the batch (torchvision's conventions, as resnet_loss_sum), then its
  // gradient into grads(). planes: channels per stage (width applied); stem = planes[0].
  double loss_and_grad(const Act& x, const std::vector<int32_t>& y, const std::vector<int>& blocks,
                       const std::vector<int>& planes, int classes) {
    back_.clear();
    grads_.clear();
    for (const auto& [name, p] : params_) grads_[name] = D(p.size(), 0.0);
    NodeP a = relu(batch_norm(conv(input(x), "conv1.weight", planes[0], 3, 1, 1), "bn1"));
    for (size_t s = 0; s < blocks.size(); ++s)
      for (int i = 0; i < blocks[s]; ++i) {
        const std::string n = "layer" + std::to_string(s + 1) + "." + std::to_string(i);
        const int stride = (s > 0 && i == 0) ? 2 : 1, pl = planes[s];
        NodeP h = relu(batch_norm(conv(a, n + ".conv1.weight", pl, 3, stride, 1), n + ".bn1"));
        h = batch_norm(conv(h, n + ".conv2.weight", pl, 3, 1, 1), n + ".bn2");
        NodeP sc = (stride != 1 || a->v.C != pl)
                       ? batch_norm(conv(a, n + ".downsample.0.weight", pl, 1, stride, 0), n + ".downsample.1")
                       : a;
        a = relu(add(h, sc));
      }
    NodeP logits = linear(global_avg(a), "fc", classes);
    // Mean cross-entropy and its gradient (softmax − one-hot) / N.
    const int N = logits->v.N, K = logits->v.C;
    double loss = 0;
    for (int n = 0; n < N; ++n) {
      const double* l = logits->v.v.data() + size_t(n) * K;
      double* g = logits->grad().v.data() + size_t(n) * K;
      const double m = *std::max_element(l, l + K);
      double s = 0;
      for (int j = 0; j < K; ++j) s += std::exp(l[j] - m);
      loss += std::log(s) + m - l[y[n]];
      for (int j = 0; j < K; ++j) g[j] = (std::exp(l[j] - m) / s - (j == y[n] ? 1.0 : 0.0)) / N;
    }
    for (auto it = back_.rbegin(); it != back_.rend(); ++it) (*it)();
    return loss / N;
  }

  const std::map<std::string, D>& grads() const { return grads_; }
  // Per batch norm (torchvision name of the bn module): the batch's per-channel mean and variance.
  const std::map<std::string, D>& bn_means() const { return bn_mean_; }
  const std::map<std::string, D>& bn_vars() const { return bn_var_; }

 private:
  struct Node {
    Act v, g;  // value; gradient (same shape, allocated when the backward first adds to it)
    Act& grad() {
      if (g.v.empty()) g = Act{D(v.v.size(), 0.0), v.N, v.C, v.H, v.W};
      return g;
    }
    // After the node's own backward step nothing reads it again: give the memory back (the
    // fashion check's activations are ~25 MB each).
    void release() {
      D().swap(v.v);
      D().swap(g.v);
    }
  };
  using NodeP = std::shared_ptr<Node>;

  static NodeP node(Act v) {
    auto p = std::make_shared<Node>();
    p->v = std::move(v);
    return p;
  }
  NodeP input(const Act& x) { return node(x); }

  // visit(col, h, w, n, c) for every in-image entry of the im2col matrix of images [n0, n0 + nb):
  // col = ((c·R + r)·R + t)·L + (n − n0)·P·Q + p·Q + q, L = nb·P·Q; entries in the padding are 0.
  template <class Visit>
  static void for_each_col(const Act& x, int n0, int nb, int R, int stride, int pad, int P, int Q, Visit visit) {
    const size_t L = size_t(nb) * P * Q;
    for (int c = 0; c < x.C; ++c)
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < R; ++t) {
          const size_t row = ((size_t(c) * R + r) * R + t) * L;
          for (int n = 0; n < nb; ++n)
            for (int p = 0; p < P; ++p) {
              const int h = p * stride - pad + r;
              if (h < 0 || h >= x.H) continue;
              for (int q = 0; q < Q; ++q) {
                const int w = q * stride - pad + t;
                if (w >= 0 && w < x.W) visit(row + (size_t(n) * P + p) * Q + q, n0 + n, c, h, w);
              }
            }
        }
  }
  static void im2col(D& cols, const Act& x, int n0, int nb, int R, int stride, int pad, int P, int Q) {
    cols.assign(size_t(x.C) * R * R * nb * P * Q, 0.0);
    for_each_col(x, n0, nb, R, stride, pad, P, Q,
                 [&](size_t col, int n, int c, int h, int w) { cols[col] = x.at(n, c, h, w); });
  }
  static void col2im_add(Act& dx, const D& cols, int n0, int nb, int R, int stride, int pad, int P, int Q) {
    for_each_col(dx, n0, nb, R, stride, pad, P, Q,
                 [&](size_t col, int n, int c, int h, int w) { dx.at(n, c, h, w) += cols[col]; });
  }
  static constexpr int kImagesPerGemm = 16;  // bounds the im2col buffer (16 images: ≤ 15 MB here)

  NodeP conv(const NodeP& x, const std::string& wname, int K, int R, int stride, int pad) {
    const Act& xv = x->v;
    const int P = (xv.H + 2 * pad - R) / stride + 1, Q = (xv.W + 2 * pad - R) / stride + 1, CRR = xv.C * R * R;
    const D& w = params_.at(wname);
    NodeP y = node(Act{D(size_t(xv.N) * K * P * Q), xv.N, K, P, Q});
    D cols, out;
    for (int n0 = 0; n0 < xv.N; n0 += kImagesPerGemm) {
      const int nb = std::min(kImagesPerGemm, xv.N - n0);
      const int L = nb * P * Q;
      im2col(cols, xv, n0, nb, R, stride, pad, P, Q);
      out.assign(size_t(K) * L, 0.0);
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, K, L, CRR, 1.0, w.data(), CRR, cols.data(), L, 0.0,
                  out.data(), L);
      for (int k = 0; k < K; ++k)
        for (int n = 0; n < nb; ++n)
          std::copy_n(out.data() + size_t(k) * L + size_t(n) * P * Q, P * Q,
                      y->v.v.data() + (size_t(n0 + n) * K + k) * P * Q);
    }
    back_.push_back([this, x, y, wname, K, R, stride, pad, P, Q, CRR] {
      const Act& xv = x->v;
      const D& w = params_.at(wname);
      D& dw = grads_.at(wname);
      D cols, dout, dcols;
      for (int n0 = 0; n0 < xv.N; n0 += kImagesPerGemm) {
        const int nb = std::min(kImagesPerGemm, xv.N - n0);
        const int L = nb * P * Q;
        dout.resize(size_t(K) * L);
        for (int k = 0; k < K; ++k)
          for (int n = 0; n < nb; ++n)
            std::copy_n(y->grad().v.data() + (size_t(n0 + n) * K + k) * P * Q, P * Q,
                        dout.data() + size_t(k) * L + size_t(n) * P * Q);
        im2col(cols, xv, n0, nb, R, stride, pad, P, Q);
        // dW += dY · colsᵀ;  dcols = Wᵀ · dY, scattered back onto the input.
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, K, CRR, L, 1.0, dout.data(), L, cols.data(), L, 1.0,
                    dw.data(), CRR);
        dcols.assign(size_t(CRR) * L, 0.0);
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, CRR, L, K, 1.0, w.data(), CRR, dout.data(), L, 0.0,
                    dcols.data(), L);
        col2im_add(x->grad(), dcols, n0, nb, R, stride, pad, P, Q);
      }
      y->release();
    });
    return y;
  }

  // y = γ·x̂ + β with x̂ = (x − μ)/√(σ² + 1e-5), μ and σ² (biased) over N·H·W per channel.
  NodeP batch_norm(const NodeP& x, const std::string& name) {
    const Act& xv = x->v;
    const int C = xv.C, HW = xv.H * xv.W;
    const double M = double(xv.N) * HW;
    const D &gamma = params_.at(name + ".weight"), &beta = params_.at(name + ".bias");
    D mean(C, 0.0), var(C, 0.0);
    for (int n = 0; n < xv.N; ++n)
      for (int c = 0; c < C; ++c)
        for (int i = 0; i < HW; ++i) mean[c] += xv.v[(size_t(n) * C + c) * HW + i];
    for (double& m : mean) m /= M;
    for (int n = 0; n < xv.N; ++n)
      for (int c = 0; c < C; ++c)
        for (int i = 0; i < HW; ++i) var[c] += std::pow(xv.v[(size_t(n) * C + c) * HW + i] - mean[c], 2);
    for (double& v : var) v /= M;
    bn_mean_[name] = mean;
    bn_var_[name] = var;
    NodeP y = node(xv);
    auto xhat = std::make_shared<D>(xv.v.size());
    for (int n = 0; n < xv.N; ++n)
      for (int c = 0; c < C; ++c)
        for (int i = 0; i < HW; ++i) {
          const size_t at = (size_t(n) * C + c) * HW + i;
          (*xhat)[at] = (xv.v[at] - mean[c]) / std::sqrt(var[c] + 1e-5);
          y->v.v[at] = gamma[c] * (*xhat)[at] + beta[c];
        }
    back_.push_back([this, x, y, xhat, name, var, C, HW, M] {
      const D& gamma = params_.at(name + ".weight");
      D &dgamma = grads_.at(name + ".weight"), &dbeta = grads_.at(name + ".bias");
      D sum_dy(C, 0.0), sum_dy_xhat(C, 0.0);
      const int N = x->v.N;
      const D& dy = y->grad().v;
      D& dx = x->grad().v;
      for (int n = 0; n < N; ++n)
        for (int c = 0; c < C; ++c)
          for (int i = 0; i < HW; ++i) {
            const size_t at = (size_t(n) * C + c) * HW + i;
            sum_dy[c] += dy[at];
            sum_dy_xhat[c] += dy[at] * (*xhat)[at];
          }
      for (int c = 0; c < C; ++c) {
        dgamma[c] += sum_dy_xhat[c];
        dbeta[c] += sum_dy[c];
      }
      // dx = γ/√(σ² + ε) · (dy − Σdy/M − x̂·Σ(dy·x̂)/M)
      for (int n = 0; n < N; ++n)
        for (int c = 0; c < C; ++c) {
          const double k = gamma[c] / std::sqrt(var[c] + 1e-5);
          for (int i = 0; i < HW; ++i) {
            const size_t at = (size_t(n) * C + c) * HW + i;
            dx[at] += k * (dy[at] - sum_dy[c] / M - (*xhat)[at] * sum_dy_xhat[c] / M);
          }
        }
      y->release();
    });
    return y;
  }

  NodeP relu(const NodeP& x) {
    Act v = x->v;
    for (double& e : v.v) e = std::max(e, 0.0);
    NodeP y = node(std::move(v));
    back_.push_back([x, y] {
      const D &dy = y->grad().v, &xv = x->v.v;
      D& dx = x->grad().v;
      for (size_t i = 0; i < xv.size(); ++i)
        if (xv[i] > 0) dx[i] += dy[i];
      y->release();
    });
    return y;
  }

  NodeP add(const NodeP& a, const NodeP& b) {
    Act v = a->v;
    for (size_t i = 0; i < v.v.size(); ++i) v.v[i] += b->v.v[i];
    NodeP y = node(std::move(v));
    back_.push_back([a, b, y] {
      const D& dy = y->grad().v;
      D &da = a->grad().v, &db = b->grad().v;
      for (size_t i = 0; i < dy.size(); ++i) {
        da[i] += dy[i];
        db[i] += dy[i];
      }
      y->release();
    });
    return y;
  }

  NodeP global_avg(const NodeP& x) {
    NodeP y = node(reference::global_avg(x->v));
    back_.push_back([x, y] {
      const int HW = x->v.H * x->v.W;
      const Act& dy = y->grad();
      D& dx = x->grad().v;
      for (int n = 0; n < x->v.N; ++n)
        for (int c = 0; c < x->v.C; ++c)
          for (int i = 0; i < HW; ++i) dx[(size_t(n) * x->v.C + c) * HW + i] += dy.at(n, c, 0, 0) / HW;
      y->release();
    });
    return y;
  }

  NodeP linear(const NodeP& x, const std::string& name, int out) {
    NodeP y = node(reference::linear(x->v, params_.at(name + ".weight"), params_.at(name + ".bias"), out));
    back_.push_back([this, x, y, name, out] {
      const D& w = params_.at(name + ".weight");
      D &dw = grads_.at(name + ".weight"), &db = grads_.at(name + ".bias");
      const int N = x->v.N, I = x->v.C;
      const D& dy = y->grad().v;
      D& dx = x->grad().v;
      for (int n = 0; n < N; ++n)
        for (int o = 0; o < out; ++o) {
          const double g = dy[size_t(n) * out + o];
          db[o] += g;
          for (int i = 0; i < I; ++i) {
            dw[size_t(o) * I + i] += g * x->v.v[size_t(n) * I + i];
            dx[size_t(n) * I + i] += g * w[size_t(o) * I + i];
          }
        }
      y->release();
    });
    return y;
  }

  std::map<std::string, D> params_, grads_, bn_mean_, bn_var_;
  std::vector<std::function<void()>> back_;
};

}  // namespace baton::reference
