// The CNN ops' defaults (backend.h): a backend that has none of them refuses a CNN with one clear
// error instead of computing something else; the layout conversions of an NCHW backend.
#include "backend/backend.h"
#include "core/error.h"

namespace baton {
namespace {
[[noreturn]] void no_cnn(const Backend& be, const char* op) {
  throw Error(fmt::format("the {} backend has no {} (convolutional networks are not available on it)",
                          be.name(), op),
              "train CNNs on the CPU (precision.device = \"cpu\")");
}
}  // namespace

// An NCHW backend: images are cast, activations already NCHW.
void Backend::images_to_activations(void* dst, const float* images, int N, int C, int H, int W) {
  cast(dst, act_dtype(), images, DType::F32, size_t(N) * C * H * W);
}
void Backend::activations_to_nchw(void* dst, const void* src, int N, int C, int H, int W) {
  copy_act(dst, src, size_t(N) * C * H * W);
}
void Backend::nchw_to_activations(void* dst, const void* src, int N, int C, int H, int W) {
  copy_act(dst, src, size_t(N) * C * H * W);
}

void Backend::conv2d_forward(void*, const void*, const void*, const void*, const Conv2d&) {
  no_cnn(*this, "convolution");
}
void Backend::conv2d_backward(void*, float*, float*, const void*, const void*, const void*, const Conv2d&) {
  no_cnn(*this, "convolution");
}
void Backend::batchnorm_forward(void*, float*, float*, const void*, const void*, const void*, int, int,
                                int, float, bool) {
  no_cnn(*this, "batch normalization");
}
void Backend::batchnorm_backward(void*, float*, float*, const void*, const void*, const float*,
                                 const float*, const void*, int, int, int, float) {
  no_cnn(*this, "batch normalization");
}
void Backend::relu_forward(void*, const void*, size_t) { no_cnn(*this, "ReLU"); }
void Backend::relu_backward(void*, const void*, const void*, size_t) { no_cnn(*this, "ReLU"); }
// The fused ops' defaults: the unfused ops in turn (a backend without CNN ops refuses in the first).
void Backend::batchnorm_relu_forward(void* y, float* mean, float* var, const void* x, const void* gamma,
                                     const void* beta, const void* residual, int N, int C, int HW, float eps,
                                     bool training) {
  const size_t n = size_t(N) * C * HW;
  batchnorm_forward(y, mean, var, x, gamma, beta, N, C, HW, eps, training);
  if (residual) residual_forward(y, y, residual, n);
  relu_forward(y, y, n);
}
void Backend::relu_batchnorm_backward(void* dx, float* dgamma, float* dbeta, const void* dy, const void* y,
                                      const void* x, const float* mean, const float* var, const void* gamma,
                                      const void*, int N, int C, int HW, float eps, void* scratch) {
  relu_backward(scratch, y, dy, size_t(N) * C * HW);
  batchnorm_backward(dx, dgamma, dbeta, scratch, x, mean, var, gamma, N, C, HW, eps);
}
size_t Backend::pool2d_workspace_bytes(const Pool2d&) const { no_cnn(*this, "pooling"); }
void Backend::pool2d_forward(void*, void*, const void*, const Pool2d&) { no_cnn(*this, "pooling"); }
void Backend::pool2d_backward(void*, const void*, const void*, const Pool2d&) { no_cnn(*this, "pooling"); }
void Backend::axpby(float*, float, const float*, float, size_t) { no_cnn(*this, "axpby"); }
void Backend::dropout(void*, const void*, int, int, float, uint64_t, int64_t) { no_cnn(*this, "dropout"); }
void Backend::classification_hits(float*, float*, const void*, const int32_t*, int, int, int) {
  no_cnn(*this, "classification accuracy");
}

}  // namespace baton
