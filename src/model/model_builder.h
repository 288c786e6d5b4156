// ModelBuilder: what a model family (GPT, later CNNs) tells the generic layer stack
// (SequentialModel) and the runtime about itself — its list of global layers, how to build any of
// them, the data it consumes, its loss terms and FLOPs, which layers share parameters across
// pipeline stages, and its default split into pipeline stages. Everything else (parameters,
// activation slots, chunks, recomputation, the split backward, pipelines, data parallelism) is
// generic and lives in SequentialModel and the runtime.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/layer_range.h"
#include "model/layer.h"
#include "model/micro_batch.h"
#include "model/tensor_parallel.h"

namespace baton {

enum class Recompute : uint8_t { NONE, SELECTIVE, FULL };
// "none" | "selective" | "full" (config parallel.recompute).
Recompute parse_recompute(const std::string& s);

// Global layers that use the same parameters (a GPT's token embedding and its LM head share
// "wte"). When a pipeline puts them on different stages, each of those stages holds a copy; the
// runtime sums the copies' gradients (Megatron's embedding group) so that they stay identical,
// and the copy on the stage of the lowest of these layers is the one that counts (grad norm,
// checkpoints).
struct TiedLayers {
  std::string param;        // the shared parameter's name
  std::vector<int> layers;  // global layers using it, ascending
};

class ModelBuilder {
 public:
  virtual ~ModelBuilder() = default;
  // "GPT", "ResNet-50", ...; and the log header's one-line description of the shape.
  virtual std::string family() const = 0;
  virtual std::string describe() const = 0;
  // Global layers, in forward order.
  virtual int num_layers() const = 0;
  // Builds global layer `g` for a rank of tensor-parallel group `tp` (kept by reference: it must
  // outlive the layer) on `be`. `recompute`: the model-wide recomputation mode (a layer that
  // supports selective recomputation builds itself for it).
  virtual std::unique_ptr<Layer> make_layer(int g, const TensorParallel& tp, const Backend& be,
                                            Recompute recompute) const = 0;
  virtual std::vector<TiedLayers> tied_layers() const { return {}; }

  // ---- data ----
  virtual InputKind input_kind() const = 0;
  // Longest sample (T of a GPT; 1 for images), and the elements of inputs and targets of B
  // samples of T positions. Each target is one loss term: the mean loss of a batch is the sum of
  // its per-term losses divided by target_elements(batch samples, T).
  virtual int max_positions() const = 0;
  virtual int64_t input_elements(int B, int T) const = 0;
  virtual int64_t target_elements(int B, int T) const = 0;
  // What evaluation reports besides the loss, each the mean over samples of a per-sample value of
  // the loss layer (Layer::metric): e.g. {"top1", "top5"} for a classifier. Empty for a GPT.
  virtual std::vector<std::string> metric_names() const { return {}; }

  // ---- cost ----
  // Model FLOPs of one optimizer step over `samples` samples (forward + backward, no
  // recomputation): what MFU divides by. `formula`: the formula as the log header prints it.
  virtual double flops_per_step(int64_t samples) const = 0;
  virtual std::string flops_formula() const = 0;
  // The per-token count llm.c, PaLM and most papers use, 6N + 6·L·C·T (N parameters, causal
  // attention counted once), for comparing MFU like for like; 0 where the family has none.
  virtual double flops_per_token_6n() const { return 0; }

  // ---- pipelines ----
  // The default split of the global layers into `stages` model stages (pp · vp), in model-stage
  // order; throws Error (with a hint) when the model cannot be split that way.
  virtual std::vector<LayerRange> default_stages(int stages) const = 0;
};

}  // namespace baton
