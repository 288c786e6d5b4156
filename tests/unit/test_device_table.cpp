// The one device table (core/device_table.h): the runtime's device names map to the right part and
// its peak for the run's compute dtype (an fp32 run is not measured against the bf16 peak; fp32 is
// the plain, non-TF32 rate), unknown devices and variants give 0 (no MFU rather than a wrong one),
// and the planner's cluster-file names reach the same entries. Expected peaks are the data sheets'
// (dense), written here independently of the table.
#include <gtest/gtest.h>

#include <set>

#include "core/device_table.h"
#include "core/error.h"
#include "plan/device.h"

namespace baton {
namespace {

TEST(DeviceTable, RuntimeNamesGiveThePeakOfTheComputeDtype) {
  struct Case {
    const char* runtime_name;  // cudaDeviceProp::name as the driver reports it
    double bf16, fp32;
  };
  const Case cases[] = {{"NVIDIA A100-SXM4-80GB", 312, 19.5}, {"NVIDIA A100-SXM4-40GB", 312, 19.5},
                        {"NVIDIA A100 80GB PCIe", 312, 19.5}, {"NVIDIA A100-PCIE-40GB", 312, 19.5},
                        {"NVIDIA H100 80GB HBM3", 989, 67},   {"NVIDIA H100 PCIe", 756, 51},
                        {"NVIDIA H200", 989, 67},             {"Tesla V100-SXM2-16GB", 0, 15.7}};
  for (const Case& c : cases) {
    EXPECT_DOUBLE_EQ(dense_peak_tflops(c.runtime_name, DType::BF16), c.bf16) << c.runtime_name;
    EXPECT_DOUBLE_EQ(dense_peak_tflops(c.runtime_name, DType::F32), c.fp32) << c.runtime_name;
  }
}

// The bug this table fixes: the runtime looked up one (bf16) peak whatever the dtype, so an fp32
// run on an H100 reported MFU against 989 TFLOP/s, 15x its fp32 peak.
TEST(DeviceTable, Fp32RunIsNotMeasuredAgainstTheBf16Peak) {
  for (const DeviceSpec& d : device_specs()) {
    for (const std::string& r : d.runtime_names) {
      if (d.peak_bf16 == 0) continue;
      EXPECT_LT(dense_peak_tflops(r, DType::F32), dense_peak_tflops(r, DType::BF16) / 4) << r;
    }
  }
}

TEST(DeviceTable, UnknownDevicesAndDtypesGiveZero) {
  for (const char* n : {"", "Intel(R) Xeon(R) Platinum 8480C (2 threads)", "NVIDIA H100 NVL",
                        "NVIDIA H200 NVL", "Tesla V100-SXM2-32GB", "NVIDIA", "H100"})
    EXPECT_EQ(dense_peak_tflops(n, DType::BF16), 0.0) << n;
  EXPECT_EQ(dense_peak_tflops("NVIDIA H100 80GB HBM3", DType::I32), 0.0);
  EXPECT_EQ(device_for_runtime_name("AMD Instinct MI300X"), nullptr);
}

// One table: every runtime name and alias names exactly one entry, and the planner's lookups
// (cluster files) return the same entries the runtime does.
TEST(DeviceTable, OneTableForThePlannerAndTheRuntime) {
  std::set<std::string> runtime, names;
  for (const DeviceSpec& d : device_specs()) {
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    for (const std::string& a : d.aliases) EXPECT_TRUE(names.insert(a).second) << a;
    for (const std::string& r : d.runtime_names) {
      EXPECT_TRUE(runtime.insert(r).second) << r;
      EXPECT_EQ(device_for_runtime_name(r), &d) << r;
      EXPECT_EQ(device_for_runtime_name("NVIDIA " + r), &d) << r;
    }
    EXPECT_EQ(&plan::find_device(d.name), &d) << d.name;
  }
  EXPECT_EQ(&plan::device_table(), &device_specs());
  EXPECT_EQ(&plan::find_device("a100"), device_for_runtime_name("NVIDIA A100-SXM4-80GB"));
  EXPECT_EQ(&plan::find_device("H100"), device_for_runtime_name("NVIDIA H100 80GB HBM3"));
  EXPECT_EQ(&find_device_spec("Titan V"), device_for_runtime_name("NVIDIA TITAN V"));
  EXPECT_THROW(find_device_spec("K80"), Error);
  EXPECT_DOUBLE_EQ(find_device_spec("H200").peak("fp32"), 67);
  EXPECT_THROW(find_device_spec("H200").peak("fp8"), Error);
}

}  // namespace
}  // namespace baton
