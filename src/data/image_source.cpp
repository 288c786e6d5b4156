// Batch assembly for every ImageSource (see image_source.h). Rows are independent pure functions of
// their indices, so any thread may write any row with the same result.
#include "data/image_source.h"

#include <exception>
#include <functional>

#include "core/error.h"

namespace baton {
namespace {

// Below this many output floats (about 1 ms of work for one thread) a batch is assembled serially.
// Measured on 2 cores shared with another process: a 128-image Fashion-MNIST batch (100k floats)
// takes 0.1 ms on one thread, 0.05 ms on two when both cores are idle, but 8 ms on two when the
// other core is busy — the team's barrier waits for a descheduled thread for a scheduler tick.
// Small batches gain microseconds from threads and can lose milliseconds.
constexpr size_t kParallelFloats = size_t{1} << 20;

// Calls write(i) for every i in [0, rows); in parallel when the batch is large.
void assemble(int rows, size_t floats_per_row, bool costly, const std::function<void(int)>& write) {
  const bool parallel = (costly && rows > 1) || static_cast<size_t>(rows) * floats_per_row >= kParallelFloats;
  // An exception must not leave an OpenMP region (a damaged JPEG): the first is rethrown after it.
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int i = 0; i < rows; ++i) {
    try {
      write(i);
    } catch (...) {
#pragma omp critical(baton_assemble_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

void ImageSource::train_rows(int64_t step, int row, int n, float* images, int32_t* labels) const {
  BATON_ASSERT(step >= 0 && row >= 0 && n >= 0 && row + n <= train_batch_rows(),
               "bad batch request step {} rows [{}, +{}) of {}", step, row, n, train_batch_rows());
  const size_t floats = sample_floats();
  assemble(n, floats, costly_samples(), [&](int i) {
    train_sample(step, row + i, images + static_cast<size_t>(i) * floats, labels + i);
  });
}

void ImageSource::eval_rows(int64_t batch, int batch_rows, int row, int n, float* images,
                            int32_t* labels) const {
  BATON_ASSERT(batch >= 0 && batch_rows > 0 && row >= 0 && n >= 0 && row + n <= batch_rows,
               "bad eval request batch {} of {} rows, rows [{}, +{})", batch, batch_rows, row, n);
  const size_t floats = sample_floats();
  assemble(n, floats, costly_samples(), [&](int i) {
    eval_sample(batch * batch_rows + row + i, images + static_cast<size_t>(i) * floats, labels + i);
  });
}

}  // namespace baton
