// Parameter table: every trainable tensor of a model by name, shape, weight-decay flag and
// tensor-parallel dimension. Parameters (and their gradients) live in one flat buffer each, carved
// into views in table order, so optimizers, grad-norms and reductions work on the flat buffer and
// checkpoints address tensors by name instead of by index arithmetic.
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
  std::string tied;            // non-empty: also used as this role (e.g. wte is also "lm_head")
  enum class Init : uint8_t { NORMAL, ZEROS, ONES };
  Init init = Init::NORMAL;
  float init_std = 0.02f;      // for Init::NORMAL
};

class ParamTable {
 public:
  // Registers a parameter; returns its index. Offsets are 16-float aligned for vector loads.
  int add(ParamSpec spec);
  int size() const { return static_cast<int>(specs_.size()); }
  const ParamSpec& spec(int i) const { return specs_[i]; }
  size_t numel(int i) const { return numels_[i]; }
  size_t offset(int i) const { return offsets_[i]; }
  size_t total() const { return total_; }  // floats in the flat buffer (incl. alignment padding)
  size_t count() const;                    // trainable scalars (no padding)
  int find(const std::string& name) const;  // -1 if absent

  // Views into flat buffers laid out by this table.
  float* at(float* flat, int i) const { return flat + offsets_[i]; }
  const float* at(const float* flat, int i) const { return flat + offsets_[i]; }

 private:
  std::vector<ParamSpec> specs_;
  std::vector<size_t> numels_;
  std::vector<size_t> offsets_;
  size_t total_ = 0;
};

}  // namespace baton
