// Model descriptions for the planner: a model is a chain of layers, and for each layer what the
// cost model and the partitioners need per micro-batch on one device (its tensor-parallel shard):
// forward/backward FLOPs, bytes of non-matmul memory traffic, parameters, the output activation
// a_l that crosses a stage cut (its gradient has the same size), the activations stashed from
// forward to backward, and the bytes all-reduced over the tensor-parallel group.
//
// GPT follows PTD-P's arithmetic (notes-dissertation §2.6): a transformer layer's forward is
// 24·b·s·h² + 4·b·s²·h FLOPs, backward twice that, the logit layer 2·b·s·h·V forward; so the sum
// over the model of (forward + backward) without recomputation is exactly the metrics formula
// 72·B·s·l·h²·(1 + s/6h + V/12lh) (a test checks this against src/train/observe/metrics.h).
// CNNs are described from the runtime's own builder, layer for layer (app/plan_model.h): plan/
// holds no model code.
#pragma once
#include <string>
#include <vector>

namespace baton::plan {

struct LayerDesc {
  std::string name;
  double fwd_flops = 0;      // per micro-batch on one device
  double bwd_flops = 0;      // includes the recomputed forward when recomputing
  double fwd_mem_bytes = 0;  // device-memory traffic of the non-matmul ops in forward
  double bwd_mem_bytes = 0;  // ... in backward (including recomputation)
  double params = 0;         // parameters held by one device
  double out_bytes = 0;      // a_l: output activation (= its gradient) per micro-batch
  double stash_bytes = 0;    // kept from forward to backward per micro-batch
  double work_bytes = 0;     // transient memory while this layer runs (scratch, recomputed acts)
  double tp_fwd_bytes = 0;   // payload all-reduced over the tensor-parallel group, forward
  double tp_bwd_bytes = 0;   // ... backward (including recomputation)
  int tied_to = -1;          // a layer sharing these weights (counted once when on one device)
  // What the trainer allocates for the layer (pipeline/stage_memory.h; exact for CNNs, which are
  // described from the runtime's layers; GPT: from the analytical sizes above).
  double param_floats = 0;   // its parameters in the flat buffer, 16-float aligned
  double buffer_floats = 0;  // non-trainable buffers (batch-norm statistics), 16-float aligned
  double in_bytes = 0;       // its input activation per micro-batch (= the previous out_bytes)
};

struct ModelDesc {
  std::string name;
  int micro_batch = 1;
  double tokens_per_sample = 1;   // seq_len for GPT, 1 for images
  double input_bytes = 0;         // input of layer 0 per micro-batch (tokens, images)
  double target_bytes = 0;        // targets per micro-batch (int32 labels or next tokens)
  int metrics = 0;                // metrics the model accumulates besides the loss (top-1, top-5)
  std::vector<LayerDesc> layers;
  double model_flops_per_sample = 0;     // whole model (all tp shards), fwd + bwd, no recompute
  double hardware_flops_per_sample = 0;  // what actually runs, recomputation included
  double total_params = 0;               // whole model, tied weights once

  int size() const { return static_cast<int>(layers.size()); }
};

struct GptShape {
  int n_layer = 4, n_head = 4, d_model = 256, seq_len = 128;
  int vocab = 0;  // padded vocabulary
};

// How activations are laid out in memory, which decides the stash sizes:
// - MEGATRON: mixed precision with dropout masks, Korthikanti et al. 2022 (Table 2):
//   sbh·(34 + 5as/h) bytes per layer without tensor parallelism, sbh·(10 + 24/t + 5as/(ht)) with
//   it, sbh·(34/t + 5as/(ht)) with sequence parallelism; full recomputation keeps only the 2sbh
//   input; selective recomputation drops the 5as/h attention part.
// - BATON_FP32: exactly what baton's CPU layers save (model/transformer_block.cpp saved_bytes).
enum class ActLayout { MEGATRON, BATON_FP32 };

struct GptOptions {
  int micro_batch = 1;
  int tp = 1;
  bool sequence_parallel = false;
  std::string recompute = "none";  // "none" | "selective" | "full"
  ActLayout layout = ActLayout::MEGATRON;
};

// Layers: embedding, n_layer transformer blocks, LM head (tied to the embedding).
ModelDesc gpt_desc(const GptShape& shape, const GptOptions& opt);

}  // namespace baton::plan
