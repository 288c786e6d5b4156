// The checkpoint file format: the layout-independent checksum, a bit-exact round trip of a GPT's
// training state and metadata, and resharding: every tensor written as 2, 3 or 4 boxes along each
// of its dimensions and read back under every other split (the path multi-rank layouts use).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "test_checkpoint_fixture.h"
#include "train/checkpoint/checkpoint_checksum.h"
#include "train/checkpoint/checkpoint_dir.h"

namespace baton {
namespace {

using testing::SmallState;
using testing::TmpDir;

// ---- checksum ----

TEST(CheckpointChecksum, GoldenValueMatchesTheDocumentedFormula) {
  // Computed independently with numpy from docs/checkpoints.md's definition.
  const float a[6] = {0.5f, -1.0f, 2.0f, 3.25f, 0.0f, 1e-3f};
  const std::vector<int64_t> shape = {2, 3};
  EXPECT_EQ(checksum_tensor(a, shape), 0x3e1dc7f7c591d90fULL);
}

TEST(CheckpointChecksum, PartialSumsOfAnyPartitionAddUpAndChangesAreSeen) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const std::vector<int64_t> shape = {7, 5, 3};
  std::vector<float> t(7 * 5 * 3);
  for (float& x : t) x = normal(rng);
  const uint64_t whole = checksum_tensor(t.data(), shape);
  // Boxes along dimension 1: [7, 2, 3] and [7, 3, 3], gathered out of the tensor.
  uint64_t sum = 0;
  for (auto [off, ext] : {std::pair<int64_t, int64_t>{0, 2}, {2, 3}}) {
    std::vector<float> box;
    for (int i = 0; i < 7; ++i)
      for (int j = off; j < off + ext; ++j)
        for (int k = 0; k < 3; ++k) box.push_back(t[(i * 5 + j) * 3 + k]);
    const std::vector<int64_t> o = {0, off, 0}, e = {7, ext, 3};
    sum += checksum_box(box.data(), shape, o, e);
  }
  EXPECT_EQ(sum, whole);

  std::vector<float> flipped = t;
  uint32_t bits;
  std::memcpy(&bits, &flipped[50], 4);
  bits ^= 1u;  // lowest mantissa bit
  std::memcpy(&flipped[50], &bits, 4);
  EXPECT_NE(checksum_tensor(flipped.data(), shape), whole);

  std::vector<float> swapped = t;
  std::swap(swapped[3], swapped[40]);
  EXPECT_NE(checksum_tensor(swapped.data(), shape), whole);
}

// ---- round trip ----

TEST(CheckpointFile, RoundTripIsBitExactWithAllMetadata) {
  TmpDir dir;
  SmallState state;
  CheckpointMeta meta = testing::test_meta(42);
  meta.layout = {2, 3, 4, 24};
  const std::string path = dir / "a.h5";
  write_checkpoint_file(path, meta, state.shards(), MPI_COMM_NULL);

  CheckpointReader r(path);
  const CheckpointMeta& m = r.meta();
  EXPECT_EQ(m.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(m.step, 42);
  EXPECT_EQ(m.tokens_consumed, meta.tokens_consumed);
  EXPECT_EQ(m.data_position, 42);
  EXPECT_EQ(m.seed, meta.seed);
  EXPECT_EQ(m.lr.decay, meta.lr.decay);
  EXPECT_EQ(m.lr.last_lr, meta.lr.last_lr);
  EXPECT_EQ(m.lr.total_steps, 100);
  EXPECT_EQ(m.config_toml, meta.config_toml);
  EXPECT_EQ(m.layout.tp, 2);
  EXPECT_EQ(m.layout.world, 24);
  EXPECT_EQ(m.created.size(), 20u) << m.created;  // 2025-01-02T03:04:05Z
  EXPECT_EQ(m.writer.rfind("baton ", 0), 0u);
  EXPECT_EQ(r.tensors().size(), 3u * state.table().size());
  ASSERT_NE(r.find("params/wte"), nullptr);
  EXPECT_EQ(r.find("optim/v/h.1.mlp.fc.weight")->dtype, "float32");

  SmallState loaded(32, 5.0f);  // different values everywhere
  r.read(loaded.shards());
  EXPECT_EQ(std::memcmp(loaded.host.params.data(), state.host.params.data(), state.host.params.size() * 4), 0);
  for (int k = 0; k < 2; ++k)  // AdamW's m and v
    EXPECT_EQ(std::memcmp(loaded.host.optim[k].flat.data(), state.host.optim[k].flat.data(),
                          state.host.optim[k].flat.size() * 4), 0);
  EXPECT_TRUE(r.verify_all().empty());
}

// ---- resharding ----

// Splits a tensor into `parts` boxes along `dim` (uneven when it does not divide); dim -1 or a
// tensor with fewer dimensions: one box, the whole tensor.
struct Split {
  int dim;
  int parts;
};

struct Pieces {
  std::vector<TensorShard> shards;
  std::vector<std::vector<float>> data;
};

// Visits every element of box (offset, extent) of a tensor of `shape`: fn(full index, box index).
template <typename Fn>
void for_each_in_box(const std::vector<int64_t>& shape, const std::vector<int64_t>& offset,
                     const std::vector<int64_t>& extent, Fn&& fn) {
  int64_t n = 1;
  for (int64_t e : extent) n *= e;
  for (int64_t b = 0; b < n; ++b) {
    int64_t rem = b, full = 0, stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      full += (rem % extent[d] + offset[d]) * stride;
      rem /= extent[d];
      stride *= shape[d];
    }
    fn(full, b);
  }
}

Pieces split(const std::string& name, const std::vector<int64_t>& shape, const float* full, Split s) {
  Pieces p;
  const bool along = s.dim >= 0 && s.dim < int(shape.size());
  const int parts = along ? s.parts : 1;
  for (int k = 0; k < parts; ++k) {
    TensorShard sh{name, shape, std::vector<int64_t>(shape.size(), 0), shape, nullptr};
    if (along) {
      const int64_t lo = shape[s.dim] * k / parts, hi = shape[s.dim] * (k + 1) / parts;
      sh.offset[s.dim] = lo;
      sh.extent[s.dim] = hi - lo;
    }
    p.data.emplace_back(sh.numel(), -777.0f);
    if (full)
      for_each_in_box(shape, sh.offset, sh.extent,
                      [&](int64_t f, int64_t b) { p.data.back()[b] = full[f]; });
    p.shards.push_back(sh);
  }
  for (size_t k = 0; k < p.shards.size(); ++k) p.shards[k].host_data = p.data[k].data();
  return p;
}

TEST(CheckpointReshard, EveryTensorRoundTripsUnderEverySplit) {
  TmpDir dir;
  SmallState state;
  const std::vector<TensorShard> whole = state.shards();
  const std::vector<Split> splits = {{-1, 1}, {0, 2}, {0, 3}, {0, 4}, {1, 2}, {1, 3}, {1, 4}};
  int checked = 0;
  for (Split w : splits) {
    // Written as boxes...
    std::vector<Pieces> written;
    std::vector<TensorShard> shards;
    for (const TensorShard& t : whole) {
      written.push_back(split(t.name, t.full_shape, t.host_data, w));
      shards.insert(shards.end(), written.back().shards.begin(), written.back().shards.end());
    }
    const std::string path = dir / fmt::format("w{}_{}.h5", w.dim, w.parts);
    write_checkpoint_file(path, testing::test_meta(1), shards, MPI_COMM_NULL);
    CheckpointReader r(path);
    for (const TensorShard& t : whole)
      ASSERT_EQ(r.find(t.name)->checksum, checksum_tensor(t.host_data, t.full_shape)) << t.name;
    // ...read back as other boxes, reassembled and compared bit for bit.
    for (Split rd : splits) {
      for (const TensorShard& t : whole) {
        Pieces got = split(t.name, t.full_shape, nullptr, rd);
        r.read(got.shards);  // the pieces cover the tensor: verified against its checksum too
        for (size_t k = 0; k < got.shards.size(); ++k)
          for_each_in_box(t.full_shape, got.shards[k].offset, got.shards[k].extent,
                          [&](int64_t f, int64_t b) {
                            ASSERT_EQ(std::memcmp(&got.data[k][b], &t.host_data[f], 4), 0)
                                << t.name << " written " << w.dim << "/" << w.parts << " read "
                                << rd.dim << "/" << rd.parts;
                          });
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, int(splits.size() * splits.size() * whole.size()));
}

TEST(CheckpointReshard, ReadsAnInteriorBox) {
  TmpDir dir;
  SmallState state;
  write_checkpoint_file(dir / "a.h5", testing::test_meta(1), state.shards(), MPI_COMM_NULL);
  const int i = state.table().find("h.0.mlp.fc.weight");  // [128, 32]
  const float* full = state.table().at(state.host.optim[0].flat.data(), i);
  std::vector<float> box(3 * 5);
  TensorShard s{"optim/m/h.0.mlp.fc.weight", {128, 32}, {60, 7}, {3, 5}, box.data()};
  CheckpointReader(dir / "a.h5").read({&s, 1});
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 5; ++b) EXPECT_EQ(box[a * 5 + b], full[(60 + a) * 32 + 7 + b]);
}

}  // namespace
}  // namespace baton
