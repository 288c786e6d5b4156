// `baton profile CONFIG --out PROFILE.json`: measures each global layer's forward and backward time
// and its memory (parameters, activations kept for backward, output, scratch) on this machine's
// device at the configured micro-batch (and sequence length), driving the model's layers one by one
// through the generic Layer interface — a GPT on random tokens, a CNN (model.kind "resnet"/"vgg")
// on data.synthetic's random images. The planner's analytical profile (docs/planner.md) can be
// checked against it, and `baton plan --profile` plans with it.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "app/app.h"
#include "backend/device.h"
#include "config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/synthetic_images.h"
#include "data/tokenizer.h"
#include "model/cnn.h"
#include "model/gpt.h"

namespace baton::app {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One micro-batch of random inputs for `builder` (timing does not depend on their values): token
// ids and next-token targets below the vocabulary for a GPT, the synthetic images and labels of
// data.synthetic for a CNN.
HostBatch random_batch(const Config& cfg, const ModelBuilder& builder, int B, int T, int vocab) {
  HostBatch h{.B = B, .T = T};
  h.targets.resize(size_t(builder.target_elements(B, T)));
  if (builder.input_kind() == InputKind::TOKENS) {
    h.tokens.resize(size_t(builder.input_elements(B, T)));
    Rng rng(cfg.train.seed);
    for (size_t i = 0; i < h.tokens.size(); ++i) {
      h.tokens[i] = static_cast<int32_t>(rng.below(vocab));
      h.targets[i] = static_cast<int32_t>(rng.below(vocab));
    }
    return h;
  }
  const ModelConfig& m = cfg.model;
  const SyntheticImages images(m.in_channels, m.image_size, m.image_size, m.classes, cfg.train.seed);
  h.images.resize(size_t(builder.input_elements(B, T)));
  images.train_rows(0, 0, B, h.images.data(), h.targets.data());
  return h;
}

}  // namespace

int run_profile(const ProfileOptions& opts) {
  BATON_REQUIRE(opts.repeats >= 1, "--repeats must be at least 1", "e.g. --repeats 3");
  // One process measures one device: the layout keys are not applied (tp = pp = 1).
  std::vector<std::string> overrides = opts.overrides;
  overrides.insert(overrides.end(), {"parallel.tp=1", "parallel.pp=1", "parallel.vp=1",
                                     "parallel.schedule=\"1f1b\"", "parallel.stages=[]",
                                     "parallel.replicas=[]", "parallel.vertical_sync=false"});
  const Config cfg = load_config(opts.config, overrides, 1);
  const bool gpt = cfg.model.kind == ModelKind::GPT;
  int vocab = 0;
  std::shared_ptr<const ModelBuilder> builder;
  if (gpt) {
    int tokenizer_vocab = 0;
    if (cfg.model.vocab_size == 0 && !cfg.data.tokenizer.empty())
      tokenizer_vocab = load_tokenizer(cfg.data)->vocab_size();
    const GptDims dims = gpt_dims(cfg.model, tokenizer_vocab);
    vocab = dims.vocab;
    builder = make_gpt(dims);
  } else {
    builder = make_cnn(cnn_dims(cfg.model));
  }
  BackendChoice choice =
      choose_backend(cfg.precision.device, parse_compute_dtype(cfg.precision.compute), 0,
                     parse_attention_kernel(cfg.precision.attention));
  Backend& be = *choice.backend;
  SequentialModel model(builder, be);
  model.init_weights(cfg.train.seed);
  // Images have no positions: T = 1 (ModelBuilder::max_positions).
  const int B = cfg.train.micro_batch, T = gpt ? cfg.model.seq_len : 1, L = model.num_layers();

  const HostBatch batch = random_batch(cfg, *builder, B, T, vocab);
  auto alloc = [&](size_t bytes) { return be.alloc(std::max<size_t>(bytes, 1)); };
  auto upload = [&](const auto& v) -> void* {
    void* d = alloc(v.size() * sizeof(v[0]));
    if (!v.empty()) be.to_device(d, v.data(), v.size() * sizeof(v[0]));
    return d;
  };
  void* tokens = upload(batch.tokens);
  void* images = upload(batch.images);
  void* targets = upload(batch.targets);
  size_t ws = 0, io = 0;
  for (int l = 0; l < L; ++l) {
    ws = std::max(ws, model.layer(l).workspace_bytes(B, T));
    io = std::max(io, model.layer(l).output_bytes(B, T));
  }
  std::vector<void*> saved(L);
  for (int l = 0; l < L; ++l) saved[l] = alloc(model.layer(l).saved_bytes(B, T));
  void* workspace = alloc(ws);
  void* dout = alloc(io);
  void* din = alloc(io);

  LayerCtx ctx;
  ctx.be = &be;
  ctx.table = &model.table();
  ctx.params = model.compute_params();
  ctx.grads = model.grads();
  ctx.buffers = model.buffers();  // batch-norm statistics
  ctx.workspace = workspace;
  ctx.B = B;
  ctx.T = T;
  ctx.tokens = static_cast<const int32_t*>(tokens);
  ctx.tokens_host = batch.tokens.empty() ? nullptr : batch.tokens.data();
  ctx.images = static_cast<const float*>(images);
  ctx.targets = static_cast<const int32_t*>(targets);
  ctx.training = true;
  ctx.loss_scale = 1.0f / float(builder->target_elements(B, T));
  auto input_of = [&](int l) -> const void* {
    return l > 0 ? model.layer(l - 1).output(saved[l - 1], B, T) : nullptr;
  };

  log::info("profiling {}: {} layers at micro-batch {}{} on {} ({} warm-up, {} timed runs each)",
            builder->describe(), L, B, gpt ? fmt::format(" x seq {}", T) : std::string(), choice.device_name,
            opts.warmup, opts.repeats);
  std::vector<std::vector<double>> fwd(L), bwd(L);
  for (int run = 0; run < opts.warmup + opts.repeats; ++run) {
    for (int l = 0; l < L; ++l) {
      Timer t;
      model.layer(l).forward(ctx, input_of(l), saved[l]);
      be.synchronize();
      if (run >= opts.warmup) fwd[l].push_back(t.ms());
    }
    for (int l = L - 1; l >= 0; --l) {
      Timer t;
      model.layer(l).backward(ctx, input_of(l), dout, l > 0 ? din : nullptr, saved[l]);
      be.synchronize();
      if (run >= opts.warmup) bwd[l].push_back(t.ms());
    }
  }

  nlohmann::json j;
  j["device"] = choice.device_name;
  j["kind"] = std::string(to_string(cfg.model.kind));
  j["model"] = builder->describe();
  j["micro_batch"] = B;
  j["seq_len"] = T;
  j["dtype"] = dtype_name(be.act_dtype());
  j["layers"] = nlohmann::json::array();
  double total_f = 0, total_b = 0;
  for (int l = 0; l < L; ++l) {
    const Layer& layer = model.layer(l);
    size_t n_params = 0;
    for (int i = 0; i < model.table().size(); ++i)
      if (model.layer_of_param()[i] == l) n_params += model.table().numel(i);
    const double f = median(fwd[l]), b = median(bwd[l]);
    total_f += f;
    total_b += b;
    j["layers"].push_back({{"name", layer.name()},
                           {"forward_ms", f},
                           {"backward_ms", b},
                           {"params", n_params},
                           {"weight_bytes", n_params * sizeof(float)},
                           {"stash_bytes", layer.saved_bytes(B, T)},
                           {"output_bytes", layer.output_bytes(B, T)},
                           {"workspace_bytes", layer.workspace_bytes(B, T)}});
  }
  j["forward_ms"] = total_f;
  j["backward_ms"] = total_b;

  for (void* p : saved) be.release(p);
  be.release(workspace);
  be.release(dout);
  be.release(din);
  be.release(tokens);
  be.release(images);
  be.release(targets);

  const std::string tmp = opts.out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    BATON_REQUIRE(f.good(), fmt::format("cannot write '{}'", tmp), "check that the directory exists and is writable");
    f << j.dump(2) << "\n";
  }
  std::rename(tmp.c_str(), opts.out.c_str());
  log::info("forward {:.1f} ms + backward {:.1f} ms per micro-batch over {} layers; wrote {}", total_f,
            total_b, L, opts.out);
  return 0;
}

}  // namespace baton::app
