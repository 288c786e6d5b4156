// Measured profiles for the planner: what `baton profile CONFIG --out PROFILE.json` writes
// (src/app/profile.cpp) — per layer the measured forward and backward milliseconds and the bytes of
// parameters, stashed activations, output and scratch, at the profile's micro-batch, seq_len
// (1 for images) and dtype, with tp = 1 on one device — and how the planner uses it instead of the
// analytical times. The model is a GPT (`kind` "gpt", or no `kind`: profiles written before CNNs)
// or a CNN (`kind` "resnet"/"vgg", `model` the runtime's one-line description of it).
//
// Reconciling a profile with a plan (docs/planner.md "Measured profiles"):
// - the model must be the profiled one: a GPT with the same number of layers (embedding, n_layer
//   blocks, head) and the same seq_len (attention is quadratic in it: not scaled); a CNN with the
//   same description (family, depth, width, image size, channels, classes: a conv's time is not
//   linear in the image size) and the same layer names; else an Error;
// - the dtype must be the profile's: a profile says nothing about other kernels;
// - a different micro-batch, tensor-parallel degree, sequence parallelism or recomputation is
//   scaled per layer by the analytical model's ratio: value(plan) = measured ×
//   analytical(plan settings) / analytical(profile settings), for the forward and backward times
//   (roofline time on the plan's device) and for stashed, output and scratch bytes. For the
//   micro-batch this is linear scaling (every term of a layer is linear in b), for tp the 1/t of
//   the sharded matmuls (the tp all-reduces are added by the planner as without a profile), for
//   full recomputation the forward added to the backward. Parameters are counted analytically
//   (they are exact; the profile's counts are only checked).
#pragma once
#include <string>
#include <vector>

#include "config/config.h"
#include "plan/cost_model.h"
#include "plan/model_desc.h"

namespace baton::plan {

struct MeasuredLayer {
  std::string name;
  double fwd_s = 0, bwd_s = 0;  // seconds per micro-batch
  double params = 0, stash_bytes = 0, out_bytes = 0, work_bytes = 0;
};

struct MeasuredProfile {
  std::string source;  // file it came from (for messages)
  std::string device;  // as `baton profile` names it
  std::string dtype = "fp32";
  ModelKind kind = ModelKind::GPT;  // config model.kind
  std::string model;         // CNNs: ModelBuilder::describe() of the profiled model
  int micro_batch = 1;
  int seq_len = 1;
  std::vector<MeasuredLayer> layers;
};

// Throws Error (naming the file) for unreadable JSON or missing/invalid fields.
MeasuredProfile load_profile(const std::string& path);
MeasuredProfile parse_profile(const std::string& json_text, const std::string& origin);

// Throws Error when the profile cannot describe this GPT in this dtype (see above).
void check_profile(const MeasuredProfile& p, const GptShape& shape, const std::string& dtype);
// Throws Error when the profile cannot describe this CNN (`kind`, `model` its description, `md`
// its layers at any micro-batch) in this dtype (see above).
void check_profile(const MeasuredProfile& p, ModelKind kind, const std::string& model,
                   const ModelDesc& md, const std::string& dtype);

// Per-layer times for the plan's options `opt`, and `md` (gpt_desc(shape, opt)) with its stash,
// output and scratch bytes replaced by the scaled measurements. `dev` is the device the analytical
// ratios are computed on.
std::vector<LayerTime> profiled_times(const MeasuredProfile& p, const GptShape& shape,
                                      const GptOptions& opt, const DeviceType& dev,
                                      const Assumptions& a, ModelDesc& md);
// The same for any model already checked against the profile: `ref` is the analytical
// description at the profile's settings (its micro-batch, tp = 1, no recomputation), `md` at the
// plan's; both have the profile's layers.
std::vector<LayerTime> profiled_times(const MeasuredProfile& p, const ModelDesc& ref,
                                      const DeviceType& dev, const Assumptions& a, ModelDesc& md);

}  // namespace baton::plan
