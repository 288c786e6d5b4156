// The runtime's CNNs as the planner's chains of layers (plan/model_desc.h). The description is
// derived from CnnBuilder itself — one entry per global layer, in its order and with its name, the
// builder's forward FLOPs (backward twice that), the runtime layers' own parameter counts, their
// ParamTable sizes (the flat buffer's floats, buffers) and their activation sizes
// (Layer::input_bytes, output_bytes, saved_bytes, workspace_bytes on the CPU backend in the
// config's dtype: what pipeline/stage_memory.h sizes a stage with) — so a planner's layer index is a
// runtime global layer index
// (parallel.stages) for every depth, width, image size, channel and class count the runtime
// accepts. plan/ holds no model code (its CMakeLists.txt), so this bridge lives with the
// subcommands that need it: `baton plan` and `baton profile`.
#pragma once
#include <string>

#include "core/dtype.h"
#include "model/cnn.h"
#include "plan/model_desc.h"

namespace baton::app {

// Per micro-batch of `micro_batch` images, activations of `act` (precision.compute): FLOPs as the
// builder counts them (convolutions and linear layers; batch norm, ReLU, pooling not counted),
// memory traffic of the other ops taken as each saved byte written once in forward and read once
// in backward (2 × saved bytes forward, twice that backward), input = the fp32 images.
plan::ModelDesc cnn_model_desc(const CnnBuilder& b, int micro_batch, DType act);

}  // namespace baton::app
