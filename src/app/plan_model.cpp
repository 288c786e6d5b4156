// The planner's description of a CNN from the runtime's builder; see plan_model.h.
#include "app/plan_model.h"

#include "backend/backend.h"
#include "core/error.h"
#include "model/param_table.h"

namespace baton::app {

plan::ModelDesc cnn_model_desc(const CnnBuilder& b, int micro_batch, DType act) {
  BATON_REQUIRE(micro_batch >= 1, fmt::format("train.micro_batch = {}", micro_batch),
                "use at least one image per micro-batch");
  // Layers only read the backend for sizes (act dtype, pooling state): nothing is allocated.
  const std::unique_ptr<Backend> be = make_cpu_backend(act);
  const double B = micro_batch;
  plan::ModelDesc m;
  m.name = b.family();
  m.micro_batch = micro_batch;
  m.tokens_per_sample = 1;
  m.input_bytes = double(b.input_elements(micro_batch, 1)) * sizeof(float);
  m.target_bytes = double(b.target_elements(micro_batch, 1)) * sizeof(int32_t);
  m.metrics = static_cast<int>(b.metric_names().size());
  auto align16 = [](size_t floats) { return double((floats + 15) / 16 * 16); };  // ParamTable's alignment
  for (int g = 0; g < b.num_layers(); ++g) {
    const std::unique_ptr<Layer> layer = b.make_layer(g, TensorParallel{}, *be, Recompute::NONE);
    ParamTable table;
    layer->add_params(table);
    plan::LayerDesc l;
    l.name = layer->name();
    l.fwd_flops = b.layer_flops(g) * B;
    l.bwd_flops = 2 * l.fwd_flops;  // input and weight gradients
    l.params = double(table.count());
    l.out_bytes = double(layer->output_bytes(micro_batch, 1));
    l.stash_bytes = double(layer->saved_bytes(micro_batch, 1));
    l.work_bytes = double(layer->workspace_bytes(micro_batch, 1));
    l.in_bytes = double(layer->input_bytes(micro_batch, 1));
    l.param_floats = align16(table.total());
    l.buffer_floats = align16(table.buffers_total());
    l.fwd_mem_bytes = 2 * l.stash_bytes;
    l.bwd_mem_bytes = 2 * l.fwd_mem_bytes;
    m.total_params += l.params;
    m.layers.push_back(std::move(l));
  }
  m.model_flops_per_sample = b.flops_per_step(1);
  m.hardware_flops_per_sample = m.model_flops_per_sample;
  return m;
}

}  // namespace baton::app
