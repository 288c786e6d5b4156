#include "train/checkpoint_attrs.h"

#include "train/checkpoint_checksum.h"
#include "train/checkpoint_h5.h"

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

}  // namespace

void write_meta_attrs(hid_t root, const CheckpointMeta& meta) {
  h5::write_attr(root, "format", std::string(kCheckpointFormatName));
  h5::write_attr(root, "format_version", meta.format_version);
  h5::write_attr(root, "checksum_algorithm", std::string(kChecksumAlgorithm));
  h5::write_attr(root, "rng", std::string(kRngNote));
  for_each_field(meta, [&](const char* name, const auto& v) { h5::write_attr(root, name, v); });
}

CheckpointMeta read_meta_attrs(hid_t root, const std::string& path) {
  std::string format;
  BATON_REQUIRE(h5::read_attr(root, "format", format) && format == kCheckpointFormatName,
                fmt::format("'{}' is an HDF5 file but not a baton checkpoint (no format = \"{}\")",
                            path, kCheckpointFormatName),
                "point at a step-NNNNNNN.h5 file written by baton train");
  CheckpointMeta m;
  BATON_REQUIRE(h5::read_attr(root, "format_version", m.format_version) &&
                    m.format_version == kCheckpointFormatVersion,
                fmt::format("checkpoint '{}' has format version {}, this baton reads version {}",
                            path, m.format_version, kCheckpointFormatVersion),
                "use the baton version that wrote it (see the file's `writer` attribute)");
  std::string algorithm;
  BATON_REQUIRE(h5::read_attr(root, "checksum_algorithm", algorithm) && algorithm == kChecksumAlgorithm,
                fmt::format("checkpoint '{}' uses checksum algorithm '{}', expected '{}'", path,
                            algorithm, kChecksumAlgorithm),
                "use the baton version that wrote it");
  for_each_field(m, [&](const char* name, auto& v) {
    if (!h5::read_attr(root, name, v))
      throw CheckpointDamaged(
          fmt::format("checkpoint '{}' lacks the metadata attribute '{}'", path, name),
          "the file is incomplete or damaged; use another checkpoint");
  });
  return m;
}

}  // namespace baton
