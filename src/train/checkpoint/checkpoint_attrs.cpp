#include "train/checkpoint/checkpoint_attrs.h"

#include <toml++/toml.h>

#include <bit>
#include <optional>
#include <string_view>

#include "train/checkpoint/checkpoint_checksum.h"
#include "train/checkpoint/checkpoint_h5.h"

namespace baton {
namespace {

// Every field once, so that writing and reading cannot drift apart.
template <typename Meta, typename Fn>
void for_each_field(Meta& m, Fn&& fn) {
  fn("step", m.step);
  fn("tokens_consumed", m.tokens_consumed);
  fn("data_position", m.data_position);
  fn("seed", m.seed);
  fn("lr_decay", m.lr.decay);
  fn("lr_max", m.lr.lr);
  fn("lr_min", m.lr.min_lr);
  fn("lr_last", m.lr.last_lr);
  fn("lr_warmup_steps", m.lr.warmup_steps);
  fn("lr_total_steps", m.lr.total_steps);
  fn("config", m.config_toml);
  fn("layout_tp", m.layout.tp);
  fn("layout_dp", m.layout.dp);
  fn("layout_pp", m.layout.pp);
  fn("layout_world", m.layout.world);
  fn("created", m.created);
  fn("writer", m.writer);
}

constexpr const char* kRngNote =
    "counter-based: weights and data order are pure functions of (seed, name/step); no other RNG state";

// The metadata's own checksum (docs/checkpoints.md "Metadata checksum"): FNV-1a 64 over the text
// "name=value\n" of every field in for_each_field's order, integers in decimal, floats as the
// decimal of their IEEE-754 bits, strings as they are. A flipped bit in `step` or the config would
// otherwise resume at another step or with another model, and pass `ckpt verify`.
struct MetaHasher {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  }
  void operator()(const char* name, const std::string& v) { line(name, v); }
  void operator()(const char* name, int64_t v) { line(name, std::to_string(v)); }
  void operator()(const char* name, uint64_t v) { line(name, std::to_string(v)); }
  void operator()(const char* name, double v) { line(name, std::to_string(std::bit_cast<uint64_t>(v))); }
  void line(const char* name, std::string_view v) {
    bytes(name);
    bytes("=");
    bytes(v);
    bytes("\n");
  }
};

constexpr const char* kGuardAttr = "guard_state";  // optional: written and hashed when not empty

uint64_t meta_checksum(const CheckpointMeta& m) {
  MetaHasher h;
  for_each_field(m, [&](const char* name, const auto& v) { h(name, v); });
  if (!m.guard_state.empty()) h(kGuardAttr, m.guard_state);
  return h.h;
}

}  // namespace

void write_meta_attrs(hid_t root, const CheckpointMeta& meta) {
  h5::write_attr(root, "format", std::string(kCheckpointFormatName));
  h5::write_attr(root, "format_version", meta.format_version);
  h5::write_attr(root, "checksum_algorithm", std::string(kChecksumAlgorithm));
  h5::write_attr(root, "rng", std::string(kRngNote));
  for_each_field(meta, [&](const char* name, const auto& v) { h5::write_attr(root, name, v); });
  if (!meta.guard_state.empty()) h5::write_attr(root, kGuardAttr, meta.guard_state);
  h5::write_attr(root, kMetaChecksumAttr, meta_checksum(meta));
}

// The tokens a checkpoint's steps consumed by its own config: step × train.global_batch ×
// model.seq_len (make_checkpoint_meta); nullopt when the config text does not say (it is covered by
// the metadata checksum, so this is a second line of defence, for a flip the checksum cannot see).
static std::optional<int64_t> tokens_by_config(const CheckpointMeta& m) {
  toml::table t;
  try {
    t = toml::parse(m.config_toml);
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
  const std::optional<int64_t> batch = t["train"]["global_batch"].value<int64_t>();
  const std::optional<int64_t> seq = t["model"]["seq_len"].value<int64_t>();
  if (!batch || !seq) return std::nullopt;
  return m.step * *batch * *seq;
}

CheckpointMeta read_meta_attrs(hid_t root, const std::string& path) {
  // What identifies the file: a flipped bit there is damage like any other (resume = "auto" falls
  // back to the previous checkpoint), never a reason to stop.
  const std::string hint = "the file is damaged, or not written by this baton; resume = \"auto\" falls back to the "
                           "previous checkpoint (`baton ckpt verify PATH` checks one; the file's `writer` attribute "
                           "names the baton that wrote it)";
  std::string format;
  if (!h5::read_attr(root, "format", format) || format != kCheckpointFormatName)
    throw CheckpointDamaged(fmt::format("'{}' is an HDF5 file but not a baton checkpoint (no format = \"{}\")", path,
                                        kCheckpointFormatName),
                            hint);
  CheckpointMeta m;
  const bool has_version = h5::read_attr(root, "format_version", m.format_version);
  if (!has_version || m.format_version != kCheckpointFormatVersion)
    throw CheckpointDamaged(has_version ? fmt::format("checkpoint '{}' has format version {}, this baton reads version {}",
                                                      path, m.format_version, kCheckpointFormatVersion)
                                        : fmt::format("checkpoint '{}' has no readable format_version", path),
                            hint);
  std::string algorithm;
  if (!h5::read_attr(root, "checksum_algorithm", algorithm) || algorithm != kChecksumAlgorithm)
    throw CheckpointDamaged(fmt::format("checkpoint '{}' uses checksum algorithm '{}', expected '{}'", path, algorithm,
                                        kChecksumAlgorithm),
                            hint);
  for_each_field(m, [&](const char* name, auto& v) {
    if (!h5::read_attr(root, name, v))
      throw CheckpointDamaged(
          fmt::format("checkpoint '{}' lacks the metadata attribute '{}'", path, name),
          "the file is incomplete or damaged; use another checkpoint");
  });
  h5::read_attr(root, kGuardAttr, m.guard_state);  // files before the guard had none
  // Every file of this format has the metadata checksum: one without it lost it (a damaged
  // attribute name), and its step, data position and config could not be trusted.
  uint64_t stored = 0;
  if (!h5::read_attr(root, kMetaChecksumAttr, stored))
    throw CheckpointDamaged(fmt::format("checkpoint '{}' has no {} attribute: its metadata (step {}, data position {}, "
                                        "config) cannot be verified", path, kMetaChecksumAttr, m.step, m.data_position),
                            hint);
  if (const uint64_t computed = meta_checksum(m); computed != stored)
    throw CheckpointDamaged(fmt::format("metadata checksum mismatch in checkpoint '{}' (stored {}, computed {}): "
                                        "step {}, data position {}, config or another attribute is damaged",
                                        path, checksum_hex(stored), checksum_hex(computed), m.step,
                                        m.data_position),
                            "the file is damaged; resume from another checkpoint (`baton ckpt verify PATH` checks one)");
  if (const std::optional<int64_t> tokens = tokens_by_config(m); tokens && *tokens != m.tokens_consumed)
    throw CheckpointDamaged(fmt::format("checkpoint '{}': tokens_consumed {} is not step {} x train.global_batch x "
                                        "model.seq_len of its config ({})", path, m.tokens_consumed, m.step, *tokens),
                            hint);
  return m;
}

}  // namespace baton
