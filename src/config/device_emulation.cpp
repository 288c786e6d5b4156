// rank_emulation(): each rank's slowdown and memory limit (see device_emulation.h).
#include "config/device_emulation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "config/virtual_workers.h"
#include "core/device_table.h"
#include "core/dtype.h"
#include "core/error.h"

namespace baton {
namespace {

void check_length(const std::vector<double>& v, const char* key, int world_size, const char* example) {
  BATON_REQUIRE(v.empty() || static_cast<int>(v.size()) == world_size,
                fmt::format("{} has {} entr{} but the job has {} rank{}: it takes one per rank", key, v.size(),
                            v.size() == 1 ? "y" : "ies", world_size, world_size == 1 ? "" : "s"),
                fmt::format("give {} entries (rank 0 first), e.g. {} = {}, or leave it empty to take it from the "
                            "devices named in hetero.virtual_workers", world_size, key, example));
}

}  // namespace

std::vector<RankEmulation> rank_emulation(const Config& cfg, int world_size) {
  const HeteroConfig& h = cfg.hetero;
  check_length(h.slowdown, "hetero.slowdown", world_size, "[1, 3]");
  check_length(h.memory_limit, "hetero.memory_limit", world_size, "[0, 8]");
  std::vector<RankEmulation> out(static_cast<size_t>(world_size));
  std::vector<const DeviceSpec*> spec(out.size(), nullptr);
  for (const VirtualWorker& vw : virtual_workers(h, world_size))
    for (const VirtualWorkerStage& st : vw.stages)
      if (!st.device.empty()) {
        spec[static_cast<size_t>(st.rank)] = &find_device_spec(st.device);  // Error listing the names
        out[static_cast<size_t>(st.rank)].device = spec[static_cast<size_t>(st.rank)]->name;
      }

  const DType compute = cfg.precision.compute == "bf16" ? DType::BF16 : DType::F32;
  const char* dtype = compute == DType::BF16 ? "bf16" : "fp32";
  double fastest = 0;
  if (h.slowdown.empty())
    for (size_t r = 0; r < out.size(); ++r)
      if (spec[r]) {
        const double peak = spec[r]->peak(compute);
        BATON_REQUIRE(peak > 0,
                      fmt::format("rank {} stands for {}, which has no {} peak in the device table: its slowdown "
                                  "cannot be derived", r, spec[r]->name, dtype),
                      fmt::format("give hetero.slowdown explicitly (one factor >= 1 per rank), or use "
                                  "precision.compute = \"fp32\" (bf16 needs Ampere or newer)"));
        fastest = std::max(fastest, peak);
      }
  for (size_t r = 0; r < out.size(); ++r) {
    RankEmulation& e = out[r];
    if (!h.slowdown.empty()) {
      e.slowdown = h.slowdown[r];
      e.slowdown_from = "hetero.slowdown";
    } else if (spec[r]) {
      e.slowdown = fastest / spec[r]->peak(compute);
      e.slowdown_from = fmt::format("{} {} TFLOP/s {} vs the fastest named {} TFLOP/s", spec[r]->name,
                                    spec[r]->peak(compute), dtype, fastest);
    }
    if (!h.memory_limit.empty())
      e.memory_limit = static_cast<size_t>(std::llround(h.memory_limit[r] * 1073741824.0));
    else if (spec[r])
      e.memory_limit = static_cast<size_t>(std::llround(spec[r]->memory_gb * 1e9));
  }
  return out;
}

}  // namespace baton
