// Measured profiles (profile.h).
#include "plan/profile.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace baton::plan {

MeasuredProfile load_profile(const std::string& path) {
  std::ifstream f(path);
  BATON_REQUIRE(f.good(), fmt::format("cannot read profile '{}'", path),
                "write one with `baton profile CONFIG --out PROFILE.json`");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_profile(ss.str(), path);
}

MeasuredProfile parse_profile(const std::string& text, const std::string& origin) {
  const std::string hint = "write it with `baton profile CONFIG --out PROFILE.json`";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(fmt::format("profile '{}' is not JSON: {}", origin, e.what()), hint);
  }
  MeasuredProfile p;
  p.source = origin;
  try {
    p.device = j.value("device", std::string("?"));
    p.dtype = j.value("dtype", std::string("fp32"));
    const std::string kind = j.value("kind", std::string("gpt"));
    const std::optional<ModelKind> k = model_kind_named(kind);
    if (!k) throw Error(fmt::format("profile '{}' measured a model of unknown kind \"{}\"", origin, kind), hint);
    p.kind = *k;
    p.model = j.value("model", std::string());
    p.micro_batch = j.at("micro_batch").get<int>();
    p.seq_len = j.at("seq_len").get<int>();
    for (const auto& l : j.at("layers")) {
      MeasuredLayer m;
      m.name = l.at("name").get<std::string>();
      m.fwd_s = l.at("forward_ms").get<double>() / 1e3;
      m.bwd_s = l.at("backward_ms").get<double>() / 1e3;
      m.params = l.value("params", 0.0);
      m.stash_bytes = l.at("stash_bytes").get<double>();
      m.out_bytes = l.at("output_bytes").get<double>();
      m.work_bytes = l.value("workspace_bytes", 0.0);
      BATON_REQUIRE(m.fwd_s >= 0 && m.bwd_s >= 0 && m.stash_bytes >= 0 && m.out_bytes >= 0,
                    fmt::format("profile '{}': layer '{}' has a negative time or size", origin, m.name),
                    hint);
      p.layers.push_back(m);
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("profile '{}' lacks a field: {}", origin, e.what()), hint);
  }
  BATON_REQUIRE(p.micro_batch >= 1 && p.seq_len >= 1 && !p.layers.empty(),
                fmt::format("profile '{}' has no layers or a micro_batch/seq_len below 1", origin), hint);
  return p;
}

namespace {
// A profile says nothing about another dtype's kernels.
void check_dtype(const MeasuredProfile& p, const std::string& dtype) {
  BATON_REQUIRE(p.dtype == dtype,
                fmt::format("profile '{}' was measured in {}, the config computes in {}", p.source,
                            p.dtype, dtype),
                fmt::format("plan with --set precision.compute={} or drop --profile (analytical "
                            "profile)",
                            p.dtype));
}
}  // namespace

void check_profile(const MeasuredProfile& p, const GptShape& shape, const std::string& dtype) {
  const std::string hint =
      "profile the same model: `baton profile CONFIG --out PROFILE.json` with this config";
  BATON_REQUIRE(p.kind == ModelKind::GPT,
                fmt::format("profile '{}' measured a {} ({}), the config is a GPT", p.source, to_string(p.kind),
                            p.model),
                hint);
  BATON_REQUIRE(static_cast<int>(p.layers.size()) == shape.n_layer + 2,
                fmt::format("profile '{}' has {} layers; the config's GPT has {} (embedding, {} "
                            "blocks, head)",
                            p.source, p.layers.size(), shape.n_layer + 2, shape.n_layer),
                hint);
  BATON_REQUIRE(p.seq_len == shape.seq_len,
                fmt::format("profile '{}' was measured at seq_len {}, the config has {} (attention "
                            "time is quadratic in it; the planner does not rescale it)",
                            p.source, p.seq_len, shape.seq_len),
                hint);
  check_dtype(p, dtype);
}

void check_profile(const MeasuredProfile& p, ModelKind kind, const std::string& model,
                   const ModelDesc& md, const std::string& dtype) {
  const std::string hint =
      "profile the same model: `baton profile CONFIG --out PROFILE.json` with this config";
  // A CNN's layer times depend on every shape key (a conv is not linear in the image size): the
  // runtime's description names them all.
  BATON_REQUIRE(p.kind == kind && p.model == model,
                fmt::format("profile '{}' measured {} ({}), the config's model is {} ({})", p.source,
                            p.model.empty() ? "a model without a description" : p.model, to_string(p.kind), model,
                            to_string(kind)),
                hint);
  BATON_REQUIRE(static_cast<int>(p.layers.size()) == md.size(),
                fmt::format("profile '{}' has {} layers; the config's {} has {}", p.source, p.layers.size(),
                            model, md.size()),
                hint);
  for (int i = 0; i < md.size(); ++i)
    BATON_REQUIRE(p.layers[i].name == md.layers[i].name,
                  fmt::format("profile '{}': layer {} is '{}', the config's model has '{}'", p.source, i,
                              p.layers[i].name, md.layers[i].name),
                  hint);
  check_dtype(p, dtype);
}

std::vector<LayerTime> profiled_times(const MeasuredProfile& p, const GptShape& shape,
                                      const GptOptions& opt, const DeviceType& dev,
                                      const Assumptions& a, ModelDesc& md) {
  check_profile(p, shape, p.dtype);
  GptOptions ref_opt = opt;  // the profile's settings: its micro-batch, one device, no recompute
  ref_opt.micro_batch = p.micro_batch;
  ref_opt.tp = 1;
  ref_opt.sequence_parallel = false;
  ref_opt.recompute = "none";
  return profiled_times(p, gpt_desc(shape, ref_opt), dev, a, md);
}

std::vector<LayerTime> profiled_times(const MeasuredProfile& p, const ModelDesc& ref,
                                      const DeviceType& dev, const Assumptions& a, ModelDesc& md) {
  BATON_ASSERT(ref.size() == md.size() && md.size() == static_cast<int>(p.layers.size()),
               "profile layers {} vs model {}", p.layers.size(), md.size());
  auto ratio = [](double plan, double base) { return base > 0 ? plan / base : 1.0; };
  std::vector<LayerTime> out(md.size());
  for (int i = 0; i < md.size(); ++i) {
    const LayerTime tp = layer_time(md.layers[i], dev, p.dtype, a);
    const LayerTime tr = layer_time(ref.layers[i], dev, p.dtype, a);
    const MeasuredLayer& m = p.layers[i];
    out[i] = {m.fwd_s * ratio(tp.fwd, tr.fwd), m.bwd_s * ratio(tp.bwd, tr.bwd)};
    LayerDesc& l = md.layers[i];
    const LayerDesc& r = ref.layers[i];
    l.stash_bytes = m.stash_bytes * ratio(l.stash_bytes, r.stash_bytes);
    l.out_bytes = m.out_bytes * ratio(l.out_bytes, r.out_bytes);
    l.work_bytes = m.work_bytes * ratio(l.work_bytes, r.work_bytes);
  }
  return out;
}

}  // namespace baton::plan
