// Parameter table: every trainable tensor of a model by name, shape, weight-decay flag and
// tensor-parallel dimension, and every non-trainable buffer (batch-norm running statistics).
// Parameters (and their gradients) live in one flat buffer each, carved into views in table order,
// so optimizers, grad-norms and reductions work on the flat buffer and checkpoints address tensors
// by name instead of by index arithmetic. Buffers live in a flat buffer of their own: the
// optimizer, the gradient reductions and the grad norm never see them; checkpoints save them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace baton {

struct ParamSpec {
  std::string name;            // e.g. "h.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // logical shape of this rank's tensor
  bool decay = false;          // AdamW weight decay applies (2-D weights only)
  int tp_dim = -1;             // dimension split across tensor-parallel ranks, -1 = replicated
  int tp_blocks = 1;           // tp_dim holds this many equal blocks, each split across ranks
                               // (fused q|k|v: rank r holds slice r of q, of k and of v)
  bool sp_partial = false;     // with sequence parallelism each rank's gradient is a partial sum
                               // over its rows (layernorm gains/biases): summed over tp after
                               // backward
  std::string tied;            // non-empty: also used as this role (e.g. wte is also "lm_head")
  enum class Init : uint8_t { NORMAL, ZEROS, ONES, UNIFORM };
  Init init = Init::NORMAL;
  float init_std = 0.02f;      // for Init::NORMAL
  float init_bound = 0.0f;     // for Init::UNIFORM: uniform in [-bound, bound)
};

// Where this rank's tensor sits inside the full logical tensor: one box per tp block.
struct ShardBox {
  std::vector<int64_t> offset;  // in the full tensor
  std::vector<int64_t> extent;
  size_t local_offset = 0;      // first element of this box in the local tensor (C order)
};

// Full logical shape of a parameter whose local shape is spec.shape on `tp_size` ranks.
std::vector<int64_t> full_shape(const ParamSpec& spec, int tp_size);
// The boxes of the full tensor held by `tp_rank` (one per tp block; one box when replicated).
// Local tensor = the boxes' contents, box after box along tp_dim, i.e. for each index of the
// dimensions before tp_dim, block 0's slice, then block 1's, ...
std::vector<ShardBox> shard_boxes(const ParamSpec& spec, int tp_rank, int tp_size);
// Copies this rank's shard out of a full tensor (C order) into `local` (numel of spec.shape).
void extract_shard(const ParamSpec& spec, int tp_rank, int tp_size, const float* full, float* local);

class ParamTable {
 public:
  // Registers a parameter; returns its index. Offsets are 16-float aligned for vector loads.
  int add(ParamSpec spec);
  int size() const { return static_cast<int>(params_.specs.size()); }
  const ParamSpec& spec(int i) const { return params_.specs[i]; }
  size_t numel(int i) const { return params_.numels[i]; }
  size_t offset(int i) const { return params_.offsets[i]; }
  size_t total() const { return params_.total; }  // floats in the flat buffer (incl. padding)
  size_t count() const;                           // trainable scalars (no padding)
  int find(const std::string& name) const { return params_.find(name); }  // -1 if absent

  // Views into flat buffers laid out by this table.
  float* at(float* flat, int i) const { return flat + params_.offsets[i]; }
  const float* at(const float* flat, int i) const { return flat + params_.offsets[i]; }

  // Non-trainable buffers, in a flat buffer of their own laid out the same way (init ZEROS or
  // ONES; a name may not be both a parameter and a buffer).
  int add_buffer(ParamSpec spec);
  int num_buffers() const { return static_cast<int>(buffers_.specs.size()); }
  const ParamSpec& buffer_spec(int i) const { return buffers_.specs[i]; }
  size_t buffer_numel(int i) const { return buffers_.numels[i]; }
  size_t buffers_total() const { return buffers_.total; }
  int find_buffer(const std::string& name) const { return buffers_.find(name); }
  float* buffer_at(float* flat, int i) const { return flat + buffers_.offsets[i]; }

 private:
  struct Entries {
    std::vector<ParamSpec> specs;
    std::vector<size_t> numels, offsets;
    size_t total = 0;
    int add(ParamSpec spec);
    int find(const std::string& name) const;
  };
  Entries params_, buffers_;
};

}  // namespace baton
