// Cost model (cost_model.h).
#include "plan/cost_model.h"

#include "core/error.h"

namespace baton::plan {

LayerTime layer_time(const LayerDesc& l, const DeviceType& dev, const std::string& dtype,
                     const Assumptions& a) {
  const double peak = dev.peak(dtype) * 1e12 * a.gemm_efficiency;
  BATON_REQUIRE(peak > 0, fmt::format("device {} has no {} tensor-core path", dev.name, dtype),
                "use precision.compute = \"fp32\" (or \"fp16\") for this cluster");
  const double bw = dev.mem_bw_gbs * 1e9 * a.mem_efficiency;
  return {l.fwd_flops / peak + l.fwd_mem_bytes / bw, l.bwd_flops / peak + l.bwd_mem_bytes / bw};
}

double allreduce_time(double bytes, int n, double gbs) {
  if (n <= 1 || bytes <= 0) return 0;
  return 2.0 * (n - 1) / n * bytes / (gbs * 1e9);
}

double transfer_time(double bytes, double gbs) { return bytes <= 0 ? 0 : bytes / (gbs * 1e9); }

double state_bytes_per_param(const std::string& dtype, bool zero1, int dp) {
  const bool mixed = dtype != "fp32";
  const double weights = mixed ? 2 + 4 : 4;  // working copy (+ fp32 master)
  const double grad = 4, opt = 8;
  const double sharded = mixed ? 4 + opt : opt;  // master weights and Adam moments shard under ZeRO-1
  if (zero1 && dp > 1) return (weights + grad + opt - sharded) + sharded / dp;
  return weights + grad + opt;
}

}  // namespace baton::plan
