// A config's model as the partitioners' chain of layers (plan_chain.h).
#include "app/plan_chain.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "app/plan_model.h"
#include "backend/backend.h"
#include "backend/device.h"
#include "core/error.h"
#include "optim/optimizer.h"
#include "plan/profile.h"

namespace baton::app {

plan::LayerTime Chain::time(int l, const plan::DeviceType& dev) const {
  if (!measured.empty()) return measured[l];
  return plan::layer_time(md.layers[l], dev, dtype, A);
}

double Chain::fb(int l, const plan::DeviceType& dev) const {
  const auto t = time(l, dev);
  return t.fwd + t.bwd;
}

Chain make_chain(const Config& cfg, const std::string& profile, const plan::Cluster& cluster, const std::string& what) {
  Chain c;
  c.dtype = cfg.precision.compute;
  c.weight_bytes_per_param = c.dtype == "fp32" ? 4 : 2;
  c.act_size = static_cast<int>(dtype_size(parse_compute_dtype(c.dtype)));
  {
    // The state tensors the config's optimizer allocates: count them on the runtime's own optimizer
    // (AdamW m and v; SGD's momentum buffer only with momentum), over one float of parameters.
    const std::unique_ptr<Backend> be = make_cpu_backend(DType::F32);
    c.optimizer_states = static_cast<int>(make_optimizer(*be, {}, 1, cfg.optim)->state().size());
  }
  const int mb = cfg.train.micro_batch;
  std::optional<plan::MeasuredProfile> prof;
  if (!profile.empty()) {
    BATON_REQUIRE(cluster.homogeneous(),
                  fmt::format("--profile with {} on the mixed cluster '{}'", what, cluster.name),
                  "a measured profile is of one device type; drop --profile to use the "
                  "analytical profile of every GPU type");
    prof = plan::load_profile(profile);
  }
  const plan::DeviceType& dev = cluster.nodes[0].device;
  if (cfg.model.kind == ModelKind::GPT) {
    if (cfg.model.vocab_size <= 0)
      throw Error(fmt::format("{}: model.vocab_size is 0 (taken from the tokenizer at train time)", cfg.source_path),
                  "the planner reads no tokenizer: set model.vocab_size (or --set model.vocab_size=V)");
    const plan::GptShape shape{cfg.model.n_layer, cfg.model.n_head, cfg.model.d_model, cfg.model.seq_len,
                               (cfg.model.vocab_size + 127) / 128 * 128};
    plan::GptOptions go;
    go.micro_batch = mb;
    go.layout = c.dtype == "fp32" ? plan::ActLayout::BATON_FP32 : plan::ActLayout::MEGATRON;
    c.md = plan::gpt_desc(shape, go);
    c.label = fmt::format("GPT {} layers, d_model {}, seq {} (micro-batch {})", shape.n_layer,
                          shape.d_model, shape.seq_len, mb);
    if (prof) {
      plan::check_profile(*prof, shape, c.dtype);
      c.measured = plan::profiled_times(*prof, shape, go, dev, c.A, c.md);
    }
    return c;
  }
  // Any CNN the runtime builds (cnn_dims refuses the others), described from its builder so that
  // the partition's layer indices are the runtime's.
  const CnnBuilder builder(cnn_dims(cfg.model));
  const DType act = parse_compute_dtype(c.dtype);
  c.md = cnn_model_desc(builder, mb, act);
  c.label = fmt::format("{} (micro-batch {})", builder.describe(), mb);
  if (prof) {
    plan::check_profile(*prof, cfg.model.kind, builder.describe(), c.md, c.dtype);
    c.measured = plan::profiled_times(*prof, cnn_model_desc(builder, prof->micro_batch, act), dev, c.A, c.md);
  }
  return c;
}

double usable_bytes(const plan::DeviceType& d, const plan::Assumptions& A) {
  return std::max(0.0, d.memory_gb - A.overhead_gb) * 1e9;
}

}  // namespace baton::app
