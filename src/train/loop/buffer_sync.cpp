// BufferSync; see buffer_sync.h.
#include "train/loop/buffer_sync.h"

#include <cmath>

namespace baton {
namespace {
bool several(const dist::Comm* c) { return c && c->size() > 1; }
}  // namespace

BufferSync::BufferSync(SequentialModel& model, dist::Comm* dp, dist::Comm* replica, bool exact,
                       int microbatches, float momentum)
    : model_(model), dp_(dp), replica_(replica), exact_(exact), m_(microbatches), a_(1.0f - momentum) {
  n_ = model.buffers() ? model.table().buffers_total() : 0;
  if (n_ > 0 && exact_ && several(dp_)) r0_ = static_cast<float*>(model.backend().alloc(n_ * sizeof(float)));
}

BufferSync::~BufferSync() {
  if (r0_) model_.backend().release(r0_);
}

void BufferSync::begin_step() {
  if (r0_) model_.backend().copy(r0_, model_.buffers(), n_);
}

void BufferSync::update() {
  if (n_ == 0) return;
  Backend& be = model_.backend();
  float* r = model_.buffers();
  if (several(dp_) && r0_) {
    const int D = dp_->size(), g = dp_->rank();
    const double am = std::pow(double(a_), m_);
    // This group's term: a^(m·(D−1−g))·(r'_g − a^m·r_0) + a^(D·m)·r_0 / D.
    be.axpby(r, float(-am), r0_, 1.0f, n_);
    be.scale(r, float(std::pow(am, D - 1 - g)), n_);
    be.axpby(r, float(std::pow(am, D) / D), r0_, 1.0f, n_);
    dp_->all_reduce(r, n_, DType::F32, dist::ReduceOp::SUM);
  } else if (several(dp_)) {
    dp_->all_reduce(r, n_, DType::F32, dist::ReduceOp::SUM);
    be.scale(r, 1.0f / float(dp_->size()), n_);
  }
  if (several(replica_)) {
    replica_->all_reduce(r, n_, DType::F32, dist::ReduceOp::SUM);
    be.scale(r, 1.0f / float(replica_->size()), n_);
  }
}

}  // namespace baton
