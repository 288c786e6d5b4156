// The model of a config as the partitioners' chain of layers (`baton plan --algorithm
// pipedream|hetpipe|madpipe`, and hetero.cluster in `baton train`, app/hetero_cluster.h): a GPT
// (plan/gpt_desc.h: embedding, blocks, head at train.micro_batch, tp = 1) or any CNN the runtime
// builds (app/plan_model.h, from CnnBuilder), so a chain's layer index is a runtime global layer
// index. Layer times are the cost model's on a given device, or a measured profile's
// (`baton profile`, plan/profile.h; one device type only).
#pragma once
#include <string>
#include <vector>

#include "config/config.h"
#include "plan/cluster.h"
#include "plan/cost_model.h"
#include "plan/model_desc.h"

namespace baton::app {

struct Chain {
  std::string label;  // "VGG-16 (224 px, batch 32)"
  plan::ModelDesc md;
  std::string dtype;
  double weight_bytes_per_param = 4;
  std::vector<plan::LayerTime> measured;  // from a profile (empty: analytical)
  plan::Assumptions A;
  // What the trainer's memory depends on besides the layers (pipeline/stage_memory.h): the state
  // tensors of the config's optimizer (as the runtime's optimizer allocates them) and the bytes of
  // an activation in the compute dtype.
  int optimizer_states = 0;
  int act_size = 4;

  plan::LayerTime time(int l, const plan::DeviceType& dev) const;
  double fb(int l, const plan::DeviceType& dev) const;  // forward + backward seconds of a minibatch
  double weight_bytes(int l) const { return md.layers[l].params * weight_bytes_per_param; }
  std::string name(int l) const { return md.layers[l].name; }
};

// `profile`: a `baton profile` JSON ("" = analytical), refused on a mixed cluster; `what` names the
// caller in errors ("--algorithm hetpipe", "hetero.cluster").
Chain make_chain(const Config& cfg, const std::string& profile, const plan::Cluster& cluster, const std::string& what);

// A GPU's memory for the partition: its device memory less the cost model's overhead, in bytes.
double usable_bytes(const plan::DeviceType& d, const plan::Assumptions& A);

}  // namespace baton::app
