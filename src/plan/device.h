// The planner's view of the device table: the one table of device specs lives in
// core/device_table.h (dense peak TFLOP/s per dtype, memory, bandwidth; the runtime's MFU reads the
// same entries). A peak of 0 means the dtype has no fast path on that device (e.g. bf16 before
// Ampere); planning a bf16 run on it is an error (cost_model.cpp).
#pragma once
#include <string>
#include <vector>

#include "core/device_table.h"

namespace baton::plan {

using DeviceType = baton::DeviceSpec;

// The built-in table, in a stable order (core's device_specs()).
const std::vector<DeviceType>& device_table();
// Case-insensitive lookup by name or alias ("A100" = "A100-80GB", "V100" = "V100-SXM2-16GB", ...);
// throws Error listing the known names.
const DeviceType& find_device(const std::string& name);

}  // namespace baton::plan
