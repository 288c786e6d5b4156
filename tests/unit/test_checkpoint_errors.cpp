// Bad checkpoints give clear errors naming the file and the tensor, and nothing is loaded
// silently: truncated file, flipped bytes (checksum mismatch), another model shape, a missing
// tensor, an unknown format version, a file that is not a checkpoint, a lost metadata checksum and a
// tokens_consumed that does not match its step (damage, which resume = "auto" falls back from).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <fstream>

#include "test_checkpoint_fixture.h"

namespace baton {
namespace {

using testing::SmallState;
using testing::TmpDir;

// Runs fn, which must throw E; returns the message.
template <typename E, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    EXPECT_FALSE(e.hint().empty());
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no exception";
  return {};
}

struct Written {
  TmpDir dir;
  SmallState state;
  std::string path = dir / "step-0000005.h5";
  Written() { write_checkpoint_file(path, testing::test_meta(5), state.shards(), MPI_COMM_NULL); }
};

// File offset of a (contiguous) dataset's first byte.
uint64_t dataset_offset(const std::string& path, const std::string& name) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const haddr_t off = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  return off;
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x5a));
}

TEST(CheckpointErrors, TruncatedFile) {
  Written w;
  std::filesystem::resize_file(w.path, std::filesystem::file_size(w.path) / 2);
  const std::string msg = error_of<CheckpointDamaged>([&] { CheckpointReader r(w.path); });
  EXPECT_NE(msg.find(w.path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(CheckpointErrors, NotHdf5AndNotACheckpoint) {
  TmpDir dir;
  std::ofstream(dir / "junk.h5") << "not an hdf5 file";
  EXPECT_NE(error_of<CheckpointDamaged>([&] { CheckpointReader r(dir / "junk.h5"); }).find("junk.h5"),
            std::string::npos);
  const hid_t f = H5Fcreate((dir / "other.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  // A file without baton's format name is damage too (a flipped bit there must not stop a resume).
  EXPECT_NE(error_of<CheckpointDamaged>([&] { CheckpointReader r(dir / "other.h5"); }).find("not a baton checkpoint"),
            std::string::npos);
  EXPECT_NE(error_of<Error>([&] { CheckpointReader r(dir / "missing.h5"); }).find("does not exist"),
            std::string::npos);
}

TEST(CheckpointErrors, FlippedBytesAreAChecksumMismatchNamingTheTensor) {
  Written w;
  const std::string tensor = "params/h.1.mlp.fc.weight";
  flip_byte(w.path, dataset_offset(w.path, tensor) + 1001);
  CheckpointReader r(w.path);  // metadata intact: opens
  SmallState into(32, 3.0f);
  const std::string msg = error_of<CheckpointDamaged>([&] { r.read(into.shards()); });
  EXPECT_NE(msg.find("checksum mismatch in tensor '" + tensor + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(w.path), std::string::npos) << msg;
  const auto bad = r.verify_all();
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].name, tensor);
}

TEST(CheckpointErrors, DifferentModelShape) {
  Written w;
  SmallState wider(48);
  const std::string msg = error_of<Error>([&] { CheckpointReader(w.path).read(wider.shards()); });
  EXPECT_NE(msg.find("tensor 'params/wte'"), std::string::npos) << msg;  // the first one checked
  EXPECT_NE(msg.find("has shape [256, 32], the model expects [256, 48]"), std::string::npos) << msg;
  EXPECT_NE(msg.find(w.path), std::string::npos) << msg;
  // A model mismatch is not "damage": resume = "auto" must not skip it and start over.
  try {
    CheckpointReader(w.path).read(wider.shards());
  } catch (const CheckpointDamaged&) {
    ADD_FAILURE() << "shape mismatch reported as damage";
  } catch (const Error&) {
  }
}

TEST(CheckpointErrors, MissingTensor) {
  TmpDir dir;
  SmallState state;
  std::vector<TensorShard> shards = state.shards();
  std::erase_if(shards, [](const TensorShard& s) { return s.name == "optim/v/wpe"; });
  write_checkpoint_file(dir / "a.h5", testing::test_meta(1), shards, MPI_COMM_NULL);
  const std::string msg = error_of<Error>([&] { CheckpointReader(dir / "a.h5").read(state.shards()); });
  EXPECT_NE(msg.find("has no tensor 'optim/v/wpe'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir / "a.h5"), std::string::npos) << msg;
}

TEST(CheckpointErrors, UnknownFormatVersion) {
  Written w;
  const hid_t f = H5Fopen(w.path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
  const int64_t v = 99;
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Fclose(f);
  // Damage (resume = "auto" falls back to the previous checkpoint; issue 22 item 3), not a stop.
  const std::string msg = error_of<CheckpointDamaged>([&] { CheckpointReader r(w.path); });
  EXPECT_NE(msg.find("format version 99"), std::string::npos) << msg;
  EXPECT_NE(msg.find(w.path), std::string::npos) << msg;
}

// Every file of this format carries meta_checksum: one without it (a flipped bit in the attribute's
// name) is damaged, not an older file whose metadata go unverified.
TEST(CheckpointErrors, MissingMetaChecksumIsDamage) {
  Written w;
  const hid_t f = H5Fopen(w.path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(H5Arename(f, "meta_checksum", "meta_checksuM"), 0);
  H5Fclose(f);
  const std::string msg = error_of<CheckpointDamaged>([&] { CheckpointReader r(w.path); });
  EXPECT_NE(msg.find("has no meta_checksum attribute"), std::string::npos) << msg;
}

// tokens_consumed is cross-checked with the step and the batch of the checkpoint's own config (a
// second line behind the metadata checksum, which covers both).
TEST(CheckpointErrors, TokensConsumedMustMatchStepAndBatch) {
  TmpDir dir;
  SmallState state;
  CheckpointMeta meta = testing::test_meta(5);
  ASSERT_GT(meta.tokens_consumed, 0);
  const std::string ok = dir / "ok.h5", bad = dir / "bad.h5";
  write_checkpoint_file(ok, meta, state.shards(), MPI_COMM_NULL);
  EXPECT_EQ(CheckpointReader(ok).meta().tokens_consumed, meta.tokens_consumed);
  meta.tokens_consumed += 1;  // written with a matching checksum: only the cross-check can see it
  write_checkpoint_file(bad, meta, state.shards(), MPI_COMM_NULL);
  const std::string msg = error_of<CheckpointDamaged>([&] { CheckpointReader r(bad); });
  EXPECT_NE(msg.find("tokens_consumed"), std::string::npos) << msg;
}

TEST(CheckpointErrors, FailedReadLeavesTheTrainingStateUntouched) {
  Written w;
  flip_byte(w.path, dataset_offset(w.path, "optim/v/wte") + 8);
  SmallState other(32, 9.0f);
  std::vector<float> device(other.table().total());
  other.backend.backend->to_host(device.data(), other.model.params(), device.size() * 4);
  EXPECT_THROW(read_train_state(w.path, other.table(), other.host), CheckpointDamaged);
  std::vector<float> after(device.size());
  other.backend.backend->to_host(after.data(), other.model.params(), after.size() * 4);
  EXPECT_EQ(after, device);  // read_train_state fills host copies only
}

}  // namespace
}  // namespace baton
