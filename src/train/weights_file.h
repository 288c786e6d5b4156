// Final-weights file written at the end of training and read by `baton generate`. This is the
// interim format until HDF5 checkpoints (issue 3) replace it: it carries the resolved config and
// every parameter by name, so it is self-describing, and it is written to a temporary name and
// renamed so an interrupted save never leaves a damaged file under the final name.
//
// Layout: "BATONWT1" (8 bytes) | u64 header bytes | JSON header | fp32 tensors in header order.
// JSON: {"format":1, "step":N, "config": "<resolved TOML>", "tensors":[{"name","shape"}...]}
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/param_table.h"

namespace baton {

struct WeightsFile {
  int64_t step = 0;
  std::string config_toml;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> tensors;
};

// Writes every parameter of `table` from the host flat buffer `params`.
void save_weights(const std::string& path, const ParamTable& table, const float* params,
                  int64_t step, const std::string& config_toml);
WeightsFile load_weights(const std::string& path);
// Copies the loaded tensors into a host flat buffer laid out by `table`; every parameter of the
// table must be present with the same shape (else baton::Error naming the tensor).
void copy_weights_into(const WeightsFile& w, const ParamTable& table, float* params,
                       const std::string& path);

}  // namespace baton
