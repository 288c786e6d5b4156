#include "optim/data_parallel.h"

#include <algorithm>

#include "core/error.h"

namespace baton {

DataParallelGrads::DataParallelGrads(Backend& be, const ParamTable& table,
                                     std::vector<int> layer_of_param, dist::Comm* dp, bool zero1,
                                     size_t bucket_bytes, bool tp_rank0)
    : be_(be), dp_(dp && dp->size() > 1 ? dp : nullptr), zero1_(zero1 && dp_), tp_rank0_(tp_rank0),
      layer_of_param_(layer_of_param) {
  BATON_ASSERT(static_cast<int>(layer_of_param.size()) == table.size(), "layer_of_param size");
  const size_t align = 16 * size_t(dp_size());
  const size_t padded = (table.total() + align - 1) / align * align;
  const size_t bucket = std::max(align, (bucket_bytes / sizeof(float)) / align * align);
  // Buckets from the end of the buffer (last layers, first to finish) to the start.
  for (size_t hi = padded; hi > 0;) {
    Bucket b;
    b.hi = hi;
    b.lo = hi > bucket ? hi - bucket : 0;
    for (int i = 0; i < table.size(); ++i) {
      const size_t off = table.offset(i), end = off + table.numel(i);
      if (off >= b.hi || end <= b.lo) continue;
      const int l = layer_of_param[i];
      b.min_layer = b.min_layer < 0 ? l : std::min(b.min_layer, l);
      b.max_layer = std::max(b.max_layer, l);
    }
    hi = b.lo;
    buckets_.push_back(std::move(b));
  }
  build_segments(table);
  if (zero1_) scratch_ = static_cast<float*>(be_.alloc(padded / dp_size() * sizeof(float)));
  int layers = 0;
  for (int l : layer_of_param_) layers = std::max(layers, l + 1);
  layer_done_.assign(layers, false);
}

void DataParallelGrads::set_late(const ParamTable& table, const std::vector<int>& params) {
  for (int i : params) {
    const size_t off = table.offset(i), end = off + table.numel(i);
    for (Bucket& b : buckets_)
      if (off < b.hi && end > b.lo) b.late = true;
  }
}

void DataParallelGrads::build_segments(const ParamTable& table) {
  auto add_overlaps = [&](size_t lo, size_t hi, size_t state_base) {
    for (int i = 0; i < table.size(); ++i) {
      const size_t off = table.offset(i), end = off + table.numel(i);
      const size_t a = std::max(lo, off), z = std::min(hi, end);
      if (a >= z) continue;
      const ParamSpec& spec = table.spec(i);
      segments_.push_back({.flat = a, .state = state_base + (a - lo), .n = z - a,
                           .decay = spec.decay, .in_norm = spec.tp_dim >= 0 || tp_rank0_});
    }
  };
  if (!zero1_) {
    add_overlaps(0, table.total(), 0);
    state_size_ = table.total();
    return;
  }
  // Rank r owns piece r of every bucket; its state is the pieces back to back (bucket.lo / dp).
  const size_t r = static_cast<size_t>(dp_->rank()), n = static_cast<size_t>(dp_size());
  for (const Bucket& b : buckets_) {
    const size_t piece = (b.hi - b.lo) / n;
    add_overlaps(b.lo + r * piece, b.lo + (r + 1) * piece, b.lo / n);
    state_size_ = std::max(state_size_, b.lo / n + piece);
  }
  std::sort(segments_.begin(), segments_.end(),
            [](const UpdateSegment& x, const UpdateSegment& y) { return x.flat < y.flat; });
}

void DataParallelGrads::launch(Bucket& b, float* grads) {
  b.launched = true;
  if (!dp_) return;
  if (zero1_) {
    const size_t piece = (b.hi - b.lo) / dp_size();
    b.request = dp_->reduce_scatter_async(grads + b.lo, scratch_ + b.lo / dp_size(), piece,
                                          dist::DType::F32, dist::ReduceOp::SUM);
  } else {
    b.request = dp_->all_reduce_async(grads + b.lo, b.hi - b.lo, dist::DType::F32,
                                      dist::ReduceOp::SUM);
  }
}

void DataParallelGrads::launch_ready(float* grads) {
  // MPI moves a non-blocking collective forward only inside MPI calls: poll the buckets in flight
  // whenever a layer finishes so they progress while the next layers compute.
  for (Bucket& b : buckets_)
    if (b.request) b.request->test();
  for (Bucket& b : buckets_) {
    if (b.launched || b.min_layer < 0 || (b.late && !late_done_)) continue;
    bool ready = true;
    for (int l = b.min_layer; l <= b.max_layer && ready; ++l) ready = layer_done_[l];
    if (ready) launch(b, grads);
  }
}

void DataParallelGrads::layer_done(int layer, float* grads) {
  BATON_ASSERT(layer >= 0 && layer < static_cast<int>(layer_done_.size()), "layer {} of {}", layer,
               layer_done_.size());
  layer_done_[layer] = true;
  launch_ready(grads);
}

void DataParallelGrads::late_done(float* grads) {
  late_done_ = true;
  launch_ready(grads);
}

void DataParallelGrads::finish(float* grads) {
  early_ = 0;
  for (Bucket& b : buckets_) {
    if (b.launched) ++early_;
    else launch(b, grads);
  }
  std::fill(layer_done_.begin(), layer_done_.end(), false);
  late_done_ = false;
  const size_t r = dp_ ? static_cast<size_t>(dp_->rank()) : 0;
  for (Bucket& b : buckets_) {
    if (b.request) b.request->wait();
    b.request.reset();
    b.launched = false;
    if (zero1_) {
      const size_t piece = (b.hi - b.lo) / dp_size();
      be_.copy(grads + b.lo + r * piece, scratch_ + b.lo / dp_size(), piece);
    }
  }
}

double DataParallelGrads::grad_sumsq(const float* grads) const {
  std::vector<std::pair<size_t, size_t>> spans;
  for (const UpdateSegment& seg : segments_)
    if (seg.in_norm) spans.emplace_back(seg.flat, seg.n);
  return be_.sum_squares_spans(grads, spans);  // one device synchronisation, not one per tensor
}

void DataParallelGrads::exclude_from_norm(const ParamTable& table, int param) {
  const size_t off = table.offset(param), end = off + table.numel(param);
  for (UpdateSegment& seg : segments_)
    if (seg.flat < end && seg.flat + seg.n > off) seg.in_norm = false;
}

void DataParallelGrads::state_to_flat(const float* state, float* flat) const {
  for (const UpdateSegment& seg : segments_) std::copy_n(state + seg.state, seg.n, flat + seg.flat);
}

void DataParallelGrads::flat_to_state(const float* flat, float* state) const {
  for (const UpdateSegment& seg : segments_) std::copy_n(flat + seg.flat, seg.n, state + seg.state);
}

void DataParallelGrads::gather_flat(float* flat) { gather_params(flat); }

void DataParallelGrads::gather_params(float* params) {
  if (!zero1_) return;
  const size_t r = static_cast<size_t>(dp_->rank());
  for (const Bucket& b : buckets_) {
    const size_t piece = (b.hi - b.lo) / dp_size();
    dp_->all_gather(params + b.lo + r * piece, params + b.lo, piece, dist::DType::F32);
  }
}

}  // namespace baton
