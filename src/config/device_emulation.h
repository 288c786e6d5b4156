// Heterogeneity on one machine (issue 13 item 5, docs/hetpipe.md "Heterogeneity on one machine"):
// each rank of a virtual-worker run may stand for a device of the device table (the @DEVICE of a
// hetero.virtual_workers stage). On it the rank's compute is stretched by a slowdown factor
// (train/hetero/compute_stretch.h) and its backend refuses allocations beyond a memory limit.
//
// Per rank r:
// - slowdown = hetero.slowdown[r] when the list is given; else, when rank r names a device, the
//   fastest named device's peak TFLOP/s for the run's precision (precision.compute) divided by r's
//   device's peak (so the fastest named device runs at 1); else 1.
// - memory limit = hetero.memory_limit[r] GiB (0 = unlimited) when the list is given; else the
//   named device's memory (the table's GB, 10^9 bytes); else unlimited.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "config/config.h"

namespace baton {

struct RankEmulation {
  std::string device;       // the device the rank stands for; "" = none named
  double slowdown = 1;      // >= 1
  size_t memory_limit = 0;  // bytes; 0 = unlimited
  std::string slowdown_from;  // how the slowdown was chosen, for the log ("hetero.slowdown", "V100: 15.7 / 15.7 TFLOP/s fp32")

  bool emulated() const { return slowdown != 1 || memory_limit != 0; }
};

// One entry per rank of a `world_size`-rank virtual-worker run (config/virtual_workers.h). Throws
// Error (with a hint) when hetero.slowdown or hetero.memory_limit does not have one entry per rank,
// a named device is not in the table, or its peak for the run's precision is unknown (e.g. bf16 on
// a V100) while the slowdown is to come from it.
std::vector<RankEmulation> rank_emulation(const Config& cfg, int world_size);

}  // namespace baton
