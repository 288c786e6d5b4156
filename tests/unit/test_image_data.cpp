// Image data: IDX files written here byte by byte (raw and gzipped with zlib's own gzwrite) read
// back exactly; the decompression cache (made once, rebuilt when short or long); every error a
// user can cause, checked for its message and its hint; the training stream (every item once per
// epoch, a new order per epoch and seed, the same sample for any slicing, loader or batch size);
// normalisation against a direct double computation; crop_flip against the definition on a
// hand-made image; SyntheticImages; and Debian's Fashion-MNIST when it is installed (expected
// values read with zlib directly), with the time to assemble a 128-image batch.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/gunzip_cache.h"
#include "data/idx_images.h"
#include "data/image_loader.h"
#include "data/permutation.h"
#include "data/synthetic_images.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// ---- IDX files, written by hand -------------------------------------------------------------

void put_big_endian(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

// An IDX file: magic 0x000008DD (DD = number of dims), the dims, the elements.
Bytes idx_file(const std::vector<uint32_t>& dims, const Bytes& elements) {
  Bytes out;
  put_big_endian(out, 0x00000800u | static_cast<uint32_t>(dims.size()));
  for (uint32_t d : dims) put_big_endian(out, d);
  out.insert(out.end(), elements.begin(), elements.end());
  return out;
}

Bytes random_bytes(size_t n, uint64_t seed, int below = 256) {
  Rng rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng.below(below));
  return b;
}

Bytes read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void write_file(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// gzip with zlib's gz* file API (not the inflate path the reader uses).
void write_gzip(const fs::path& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// The first `n` decompressed bytes of a gzip file, read with zlib's gzread.
Bytes gunzip_prefix(const std::string& path, size_t n) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return {};
  Bytes b(n);
  const int got = gzread(f, b.data(), static_cast<unsigned>(n));
  gzclose(f);
  b.resize(got < 0 ? 0 : static_cast<size_t>(got));
  return b;
}

// Runs fn and expects a baton::Error whose message contains every string of `what` and whose
// hint contains `hint`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& what,
                  const std::string& hint) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << what.front() << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& w : what)
      EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
    EXPECT_NE(e.hint().find(hint), std::string::npos)
        << "hint '" << e.hint() << "' lacks '" << hint << "' (error: " << msg << ")";
  }
}

struct Batch {
  std::vector<float> images;
  std::vector<int32_t> labels;
  Batch(int rows, size_t floats) : images(rows * floats), labels(rows) {}
  bool operator==(const Batch&) const = default;
};

Batch train_batch(const ImageSource& src, int64_t step, int row, int n) {
  Batch b(n, src.sample_floats());
  src.train_rows(step, row, n, b.images.data(), b.labels.data());
  return b;
}

Batch eval_batch(const ImageSource& src, int64_t batch, int batch_rows, int row, int n) {
  Batch b(n, src.sample_floats());
  src.eval_rows(batch, batch_rows, row, n, b.images.data(), b.labels.data());
  return b;
}

class ImageDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("baton-test-images-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const char* old = std::getenv("BATON_CACHE_DIR");
    saved_cache_dir_ = old ? std::optional<std::string>(old) : std::nullopt;
    ::setenv("BATON_CACHE_DIR", (dir_ / "cache").c_str(), 1);
  }
  void TearDown() override {
    if (saved_cache_dir_)
      ::setenv("BATON_CACHE_DIR", saved_cache_dir_->c_str(), 1);
    else
      ::unsetenv("BATON_CACHE_DIR");
    fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes N images of H×W (C = 0: a 3-dimension file) with pixels from `seed`, and N labels in
  // [0, classes); returns the pixel bytes in file order.
  Bytes write_images(const std::string& name, int N, int H, int W, int C, uint64_t seed) {
    std::vector<uint32_t> dims{uint32_t(N), uint32_t(H), uint32_t(W)};
    if (C) dims.push_back(uint32_t(C));
    const Bytes pixels = random_bytes(size_t(N) * H * W * std::max(C, 1), seed);
    write_file(path(name), idx_file(dims, pixels));
    return pixels;
  }
  Bytes write_labels(const std::string& name, int N, int classes, uint64_t seed) {
    const Bytes labels = random_bytes(N, seed, classes);
    write_file(path(name), idx_file({uint32_t(N)}, labels));
    return labels;
  }

  // A random dataset of N images (labels in [0, 10)) written as "img" / "lab" and opened.
  struct Dataset {
    IdxImages images;
    IdxLabels labels;
  };
  Dataset random_dataset(int N, int H, int W, int C, uint64_t seed) {
    write_images("img", N, H, W, C, seed);
    write_labels("lab", N, 10, seed + 1);
    return {IdxImages::open(path("img")), IdxLabels::open(path("lab"))};
  }

  fs::path dir_;
  std::optional<std::string> saved_cache_dir_;
};

// ---- IDX reading ----------------------------------------------------------------------------

TEST_F(ImageDataTest, ReadsThreeDimensionImagesAndLabelsExactly) {
  const Bytes pixels = write_images("img", 5, 4, 3, 0, 1);
  const Bytes labels = write_labels("lab", 5, 10, 2);
  const IdxImages images = IdxImages::open(path("img"));
  EXPECT_EQ(images.count(), 5);
  EXPECT_EQ(images.height(), 4);
  EXPECT_EQ(images.width(), 3);
  EXPECT_EQ(images.channels(), 1);
  ASSERT_EQ(images.image_bytes(), 12u);
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(std::equal(images.image(i), images.image(i) + 12, pixels.begin() + 12 * i)) << i;
  const IdxLabels l = IdxLabels::open(path("lab"));
  ASSERT_EQ(l.count(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(l[i], labels[i]);
  EXPECT_EQ(l.max_label(), *std::max_element(labels.begin(), labels.end()));
}

TEST_F(ImageDataTest, ReadsFourDimensionImagesChannelsLast) {
  const int N = 3, H = 2, W = 5, C = 3;
  const Bytes pixels = write_images("img4", N, H, W, C, 3);
  const IdxImages images = IdxImages::open(path("img4"));
  EXPECT_EQ(images.channels(), C);
  EXPECT_EQ(images.height(), H);
  EXPECT_EQ(images.width(), W);
  for (int i = 0; i < N; ++i)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        for (int c = 0; c < C; ++c)
          EXPECT_EQ(images.image(i)[(y * W + x) * C + c], pixels[((i * H + y) * W + x) * C + c]);
}

TEST_F(ImageDataTest, GzipFilesReadLikeRawOnesWhateverTheirName) {
  const Bytes pixels = random_bytes(4 * 6 * 6 * 2, 4);
  const Bytes file = idx_file({4, 6, 6, 2}, pixels);
  write_gzip(dir_ / "img.gz", file);
  write_gzip(dir_ / "img-no-suffix", file);
  for (const char* name : {"img.gz", "img-no-suffix"}) {
    const IdxImages images = IdxImages::open(path(name));
    EXPECT_EQ(images.path(), path(name));  // errors name the user's file, not the cache copy
    ASSERT_EQ(images.count(), 4);
    EXPECT_TRUE(std::equal(images.image(0), images.image(0) + pixels.size(), pixels.begin()));
    // The mapped bytes are the cache copy: the decompressed file, byte for byte.
    EXPECT_EQ(read_file(gunzip_cache_path(path(name))), file);
  }
}

// ---- the decompression cache ----------------------------------------------------------------

TEST_F(ImageDataTest, CacheDirectoryComesFromTheEnvironmentInOrder) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string saved_xdg = xdg ? xdg : "", saved_home = home ? home : "";
  EXPECT_EQ(cache_dir(), path("cache"));
  ::setenv("BATON_CACHE_DIR", "", 1);  // empty counts as unset
  ::setenv("XDG_CACHE_HOME", "/x/xdg", 1);
  EXPECT_EQ(cache_dir(), "/x/xdg/baton");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/x/home", 1);
  EXPECT_EQ(cache_dir(), "/x/home/.cache/baton");
  ::unsetenv("HOME");
  expect_error([] { cache_dir(); }, {"no cache directory"}, "BATON_CACHE_DIR");
  xdg ? (void)::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1) : (void)::unsetenv("XDG_CACHE_HOME");
  home ? (void)::setenv("HOME", saved_home.c_str(), 1) : (void)::unsetenv("HOME");
}

TEST_F(ImageDataTest, SecondOpenReusesTheCacheWithoutDecompressing) {
  write_gzip(dir_ / "img.gz", idx_file({2, 3, 3}, random_bytes(18, 5)));
  IdxImages::open(path("img.gz"));
  const std::string cache = gunzip_cache_path(path("img.gz"));
  ASSERT_TRUE(fs::exists(cache));
  // Age the copy: a rewrite would give it a new inode (rename) and a new mtime.
  const auto old_time = fs::last_write_time(cache) - std::chrono::hours(24);
  fs::last_write_time(cache, old_time);
  struct stat before {};
  ASSERT_EQ(::stat(cache.c_str(), &before), 0);
  const IdxImages again = IdxImages::open(path("img.gz"));
  struct stat after {};
  ASSERT_EQ(::stat(cache.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(fs::last_write_time(cache), old_time);
  EXPECT_EQ(again.count(), 2);
  // Only the final copy is left: no temporary files.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "cache"), fs::directory_iterator()), 1);
}

TEST_F(ImageDataTest, ShortOrLongCacheIsRebuilt) {
  const Bytes file = idx_file({3, 4, 4}, random_bytes(48, 6));
  write_gzip(dir_ / "img.gz", file);
  IdxImages::open(path("img.gz"));
  const std::string cache = gunzip_cache_path(path("img.gz"));
  for (const Bytes& damaged :
       {Bytes(file.begin(), file.end() - 7), Bytes(file.begin(), file.begin() + 2), [&] {
          Bytes b = file;
          b.push_back(0);
          return b;
        }()}) {
    write_file(cache, damaged);
    const IdxImages images = IdxImages::open(path("img.gz"));
    ASSERT_EQ(images.count(), 3);
    EXPECT_TRUE(std::equal(images.image(0), images.image(0) + 48, file.begin() + 16));
    EXPECT_EQ(read_file(cache), file);
  }
}

TEST_F(ImageDataTest, ChangedSourceGetsANewCacheCopy) {
  write_gzip(dir_ / "img.gz", idx_file({1, 2, 2}, random_bytes(4, 7)));
  const std::string first = gunzip_cache_path(path("img.gz"));
  fs::last_write_time(path("img.gz"), fs::last_write_time(path("img.gz")) - std::chrono::hours(1));
  EXPECT_NE(gunzip_cache_path(path("img.gz")), first);
  const Bytes second_file = idx_file({2, 2, 2}, random_bytes(8, 8));
  write_gzip(dir_ / "img.gz", second_file);
  EXPECT_EQ(IdxImages::open(path("img.gz")).count(), 2);
}

// ---- errors ---------------------------------------------------------------------------------

TEST_F(ImageDataTest, MissingFilesNameTheSetting) {
  expect_error([&] { IdxImages::open(path("nope")); }, {"cannot open", path("nope")}, "data.train");
  expect_error([&] { IdxLabels::open(path("nope")); }, {"cannot open", path("nope")},
               "data.train_labels");
}

TEST_F(ImageDataTest, BadMagicIsNotIdx) {
  write_images("img", 2, 3, 3, 0, 1);
  write_labels("lab", 2, 10, 2);
  write_file(dir_ / "text", Bytes{'h', 'e', 'l', 'l', 'o', '\n', 0, 0, 0, 0});
  expect_error([&] { IdxLabels::open(path("img")); }, {"not an IDX label file", "0x00000803"},
               "data.train_labels");
  expect_error([&] { IdxImages::open(path("lab")); },
               {"not an IDX image file", "0x00000801", "0x00000803", "0x00000804"}, "data.train");
  expect_error([&] { IdxImages::open(path("text")); }, {"not an IDX image file", "0x68656c6c"},
               "data.train");
  // A known layout with another element type (0x0D = float32) is not baton's either.
  Bytes floats = idx_file({1, 1, 1}, Bytes(4, 0));
  floats[2] = 0x0D;
  write_file(dir_ / "floats", floats);
  expect_error([&] { IdxImages::open(path("floats")); }, {"0x00000d03"}, "data.train");
}

TEST_F(ImageDataTest, TruncatedOrOverlongFilesAreRefused) {
  const Bytes file = idx_file({3, 4, 4}, random_bytes(48, 9));
  write_file(dir_ / "short", Bytes(file.begin(), file.end() - 1));
  expect_error([&] { IdxImages::open(path("short")); },
               {path("short"), "truncated", "3×4×4", "63 bytes", "64"}, "download it again");
  write_file(dir_ / "header", Bytes(file.begin(), file.begin() + 10));
  expect_error([&] { IdxImages::open(path("header")); }, {"truncated", "needs 16"},
               "download it again");
  write_file(dir_ / "tiny", Bytes(file.begin(), file.begin() + 3));
  expect_error([&] { IdxImages::open(path("tiny")); }, {"truncated"}, "download it again");
  Bytes longer = file;
  longer.push_back(1);
  write_file(dir_ / "long", longer);
  expect_error([&] { IdxImages::open(path("long")); }, {"extra bytes"}, "download it again");
  // Dimensions whose product overflows 64 bits.
  write_file(dir_ / "huge", idx_file({0xffffffffu, 0xffffffffu, 0xffffffffu}, Bytes(8, 0)));
  expect_error([&] { IdxImages::open(path("huge")); }, {"more than 2^64", "truncated"},
               "download it again");
  // Truncated contents of an intact gzip file: named by the .gz the user gave.
  write_gzip(dir_ / "short.gz", Bytes(file.begin(), file.end() - 5));
  expect_error([&] { IdxImages::open(path("short.gz")); }, {path("short.gz"), "truncated"},
               "download it again");
  // Labels too: dims say 5, file holds 4.
  write_file(dir_ / "labels", idx_file({5}, Bytes(4, 1)));
  expect_error([&] { IdxLabels::open(path("labels")); }, {"truncated"}, "download it again");
}

TEST_F(ImageDataTest, DamagedGzipIsRefused) {
  const Bytes file = idx_file({20, 8, 8}, random_bytes(20 * 64, 10));
  write_gzip(dir_ / "ok.gz", file);
  const Bytes gz = read_file(dir_ / "ok.gz");
  write_file(dir_ / "cut.gz", Bytes(gz.begin(), gz.begin() + gz.size() / 2));
  expect_error([&] { IdxImages::open(path("cut.gz")); },
               {path("cut.gz"), "damaged gzip", "truncated"}, "gzip -t");
  Bytes flipped = gz;
  for (size_t i = 20; i < flipped.size() - 8; i += 7) flipped[i] ^= 0x5a;
  write_file(dir_ / "flipped.gz", flipped);
  expect_error([&] { IdxImages::open(path("flipped.gz")); }, {path("flipped.gz"), "damaged gzip"},
               "gzip -t");
  // Only the trailer's CRC damaged: the data inflates but does not check out.
  Bytes crc = gz;
  crc[crc.size() - 8] ^= 0xff;
  write_file(dir_ / "crc.gz", crc);
  expect_error([&] { IdxImages::open(path("crc.gz")); }, {"damaged gzip"}, "gzip -t");
  // None of them left a cache copy or a temporary file behind.
  EXPECT_FALSE(fs::exists(dir_ / "cache") && !fs::is_empty(dir_ / "cache"));
}

TEST_F(ImageDataTest, UnwritableCacheIsAnError) {
  write_gzip(dir_ / "img.gz", idx_file({1, 2, 2}, Bytes(4, 3)));
  write_file(dir_ / "a-file", Bytes{1});
  ::setenv("BATON_CACHE_DIR", (dir_ / "a-file" / "sub").c_str(), 1);  // a path through a file
  expect_error([&] { IdxImages::open(path("img.gz")); }, {"cannot create the cache directory"},
               "BATON_CACHE_DIR");
}

TEST_F(ImageDataTest, DatasetThatDoesNotFitTheModelIsRefused) {
  write_images("img", 4, 5, 5, 0, 11);
  write_images("rect", 4, 5, 6, 0, 11);
  write_images("rgb", 4, 5, 5, 3, 11);
  write_file(dir_ / "lab", idx_file({4}, Bytes{0, 9, 3, 1}));
  const IdxImages img = IdxImages::open(path("img")), rect = IdxImages::open(path("rect")),
                  rgb = IdxImages::open(path("rgb"));
  const IdxLabels lab = IdxLabels::open(path("lab"));
  EXPECT_NO_THROW(check_images_match_model(img, lab, 5, 1, 10));
  expect_error([&] { check_images_match_model(img, lab, 28, 1, 10); },
               {path("img"), "5×5 images", "model.image_size is 28"}, "model.image_size = 5");
  expect_error([&] { check_images_match_model(rect, lab, 5, 1, 10); }, {"5×6 images"}, "square");
  expect_error([&] { check_images_match_model(rgb, lab, 5, 1, 10); },
               {"3-channel images", "model.in_channels is 1"}, "model.in_channels = 3");
  expect_error([&] { check_images_match_model(img, lab, 5, 1, 5); },
               {path("lab"), "label 9", "model.classes is 5"}, "model.classes = 10");
}

TEST_F(ImageDataTest, LoaderRefusesMismatchedOrUnusableData) {
  write_images("img", 5, 3, 3, 0, 12);
  write_labels("lab4", 4, 10, 13);
  write_labels("lab5", 5, 10, 13);
  write_images("empty", 0, 3, 3, 0, 12);
  write_labels("lab0", 0, 10, 13);
  write_file(dir_ / "flat", idx_file({2, 3, 3}, Bytes(18, 7)));  // every pixel 7
  const IdxImages img = IdxImages::open(path("img")), empty = IdxImages::open(path("empty")),
                  flat = IdxImages::open(path("flat"));
  const IdxLabels lab4 = IdxLabels::open(path("lab4")), lab5 = IdxLabels::open(path("lab5")),
                  lab0 = IdxLabels::open(path("lab0"));
  expect_error([&] { ImageLoader(img, lab4, 4, 1); },
               {path("img"), "5 images", path("lab4"), "4 labels"}, "data.train_labels");
  expect_error([&] { ImageLoader(empty, lab0, 4, 1); }, {"no images"}, "non-empty");
  expect_error([&] { ChannelStats::of(empty); }, {"no images"}, "non-empty");
  expect_error([&] { ImageLoader(img, lab5, 0, 1); }, {"global batch 0"}, "train.global_batch");
  write_labels("lab2", 2, 10, 13);
  const IdxLabels lab2 = IdxLabels::open(path("lab2"));
  expect_error([&] { ImageLoader(flat, lab2, 2, 1, {.normalize = ChannelStats::of(flat)}); },
               {"standard deviation 0"}, "data.normalize = false");
  const ChannelStats three{{0.5, 0.5, 0.5}, {0.2, 0.2, 0.2}};
  expect_error([&] { ImageLoader(img, lab5, 2, 1, {.normalize = three}); },
               {"statistics for 3 channels", "1-channel"}, "same number of channels");
  expect_error([] { parse_augment("flip"); }, {"'flip'"}, "crop_flip");
  EXPECT_EQ(parse_augment("crop_flip"), Augment::CROP_FLIP);
  EXPECT_EQ(parse_augment("none"), Augment::NONE);
}

// ---- the training stream --------------------------------------------------------------------

TEST(Permutation, EveryIndexExactlyOnceForManySizes) {
  for (int64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 63, 64, 65, 1000, 4097}) {
    for (uint64_t key : {0ull, 1ull, 0xdeadbeefull}) {
      const Permutation p(n, key);
      std::vector<int> seen(n, 0);
      for (int64_t i = 0; i < n; ++i) ++seen[p(i)];
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }))
          << "n=" << n << " key=" << key;
    }
  }
}

// The items of epoch e of a loader's stream, in stream order.
std::vector<int64_t> epoch_items(const ImageLoader& loader, int64_t e) {
  std::vector<int64_t> items;
  for (int64_t i = e * loader.size(); i < (e + 1) * loader.size(); ++i)
    items.push_back(loader.stream_item(i));
  return items;
}

TEST_F(ImageDataTest, EachEpochIsAFreshPermutation) {
  const int N = 1000;
  const auto [img, lab] = random_dataset(N, 1, 1, 0, 14);
  const ImageLoader a(img, lab, 32, 7), b(img, lab, 32, 8);
  std::vector<int64_t> identity(N);
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t e : {0, 1, 2, 1000}) {
    std::vector<int64_t> items = epoch_items(a, e);
    std::vector<int64_t> sorted = items;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "epoch " << e << " is not a permutation";
    // A shuffle, not a near-identity: a random permutation has one fixed point on average.
    int fixed = 0;
    for (int i = 0; i < N; ++i) fixed += items[i] == i;
    EXPECT_LT(fixed, 10) << "epoch " << e;
    epochs.push_back(std::move(items));
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_NE(epochs[0], epochs[3]);
  EXPECT_NE(epoch_items(b, 0), epochs[0]);  // another seed
}

// Without augmentation or normalisation, sample `item` of a dataset is its pixels / 255.
void expect_item(const Batch& b, int row, const IdxImages& img, const IdxLabels& lab,
                 int64_t item) {
  const size_t floats = img.image_bytes();
  ASSERT_EQ(b.labels[row], lab[item]) << "row " << row;
  for (size_t j = 0; j < floats; ++j)
    ASSERT_EQ(b.images[row * floats + j], static_cast<float>(img.image(item)[j] / 255.0))
        << "row " << row << " element " << j;
}

TEST_F(ImageDataTest, TrainRowsAreSamplesOfTheStreamForAnySlicing) {
  const int N = 10;  // batches of 7 and 4 straddle epoch boundaries
  const auto [img, lab] = random_dataset(N, 3, 3, 0, 16);
  const ImageLoader by7(img, lab, 7, 3), again(img, lab, 7, 3), by4(img, lab, 4, 3);
  for (int64_t step : {5, 0, 1, 2, 3, 1001}) {  // any order: nothing is carried between calls
    const Batch full = train_batch(by7, step, 0, 7);
    for (int r = 0; r < 7; ++r) expect_item(full, r, img, lab, by7.stream_item(step * 7 + r));
    EXPECT_EQ(train_batch(again, step, 0, 7), full);
    // Data-parallel slices of the global batch reproduce it.
    for (int cut : {1, 3, 6}) {
      Batch joined = train_batch(by7, step, 0, cut), rest = train_batch(by7, step, cut, 7 - cut);
      joined.images.insert(joined.images.end(), rest.images.begin(), rest.images.end());
      joined.labels.insert(joined.labels.end(), rest.labels.begin(), rest.labels.end());
      EXPECT_EQ(joined, full) << "step " << step << " cut " << cut;
    }
  }
  // Another global batch size cuts the same stream differently: sample i is the same.
  for (int64_t i = 0; i < 60; ++i) {
    EXPECT_EQ(by4.stream_item(i), by7.stream_item(i));
    EXPECT_EQ(train_batch(by4, i / 4, i % 4, 1), train_batch(by7, i / 7, i % 7, 1)) << i;
  }
}

TEST_F(ImageDataTest, LargeBatchesAssembledByThreadsEqualRowByRow) {
  // 48 × 3 × 96 × 96 = 1.3M floats: above parallel_rows' threshold (2^20), so threads write it.
  const int N = 40, G = 48;
  const auto [img, lab] = random_dataset(N, 96, 96, 3, 18);
  const ImageLoader loader(img, lab, G, 4,
                           {.normalize = ChannelStats::of(img), .augment = Augment::CROP_FLIP});
  for (int64_t step : {0, 2}) {  // step 0 lies in epoch 0 and 1, step 2 in epoch 2
    const Batch full = train_batch(loader, step, 0, G);
    for (int r = 0; r < G; r += 5) {
      const Batch one = train_batch(loader, step, r, 1);
      EXPECT_TRUE(std::equal(one.images.begin(), one.images.end(),
                             full.images.begin() + r * loader.sample_floats()));
      EXPECT_EQ(one.labels[0], full.labels[r]);
    }
  }
}

TEST_F(ImageDataTest, ValidationTilesTheSetInOrder) {
  const int N = 10;
  const auto [img, lab] = random_dataset(N, 2, 2, 0, 20);
  const ImageLoader loader(img, lab, 8, 5, {.augment = Augment::CROP_FLIP});
  EXPECT_EQ(loader.size(), N);
  for (int64_t batch : {0, 1, 2, 7}) {
    const Batch b = eval_batch(loader, batch, 4, 0, 4);
    for (int r = 0; r < 4; ++r)
      expect_item(b, r, img, lab, (batch * 4 + r) % N);  // never augmented
    EXPECT_EQ(eval_batch(loader, batch, 4, 1, 2).labels,
              std::vector<int32_t>(b.labels.begin() + 1, b.labels.begin() + 3));
  }
}

// ---- normalisation and augmentation ---------------------------------------------------------

TEST_F(ImageDataTest, NormalisationUsesTrainingStatisticsComputedInDouble) {
  const int N = 7, H = 5, W = 4, C = 3;
  const Bytes pixels = write_images("train", N, H, W, C, 22);
  write_images("valid", 3, H, W, C, 23);
  write_labels("lab3", 3, 10, 25);
  const IdxImages train = IdxImages::open(path("train")), valid = IdxImages::open(path("valid"));
  const IdxLabels lab3 = IdxLabels::open(path("lab3"));
  // Independent two-pass computation straight from the bytes (channel = index mod C).
  std::vector<double> mean(C, 0), sd(C, 0);
  const double per_channel = double(pixels.size()) / C;
  for (size_t k = 0; k < pixels.size(); ++k) mean[k % C] += pixels[k] / 255.0 / per_channel;
  for (size_t k = 0; k < pixels.size(); ++k)
    sd[k % C] += std::pow(pixels[k] / 255.0 - mean[k % C], 2) / per_channel;
  for (auto& s : sd) s = std::sqrt(s);
  const ChannelStats stats = ChannelStats::of(train);
  ASSERT_EQ(stats.mean.size(), size_t(C));
  for (int c = 0; c < C; ++c) {
    EXPECT_NEAR(stats.mean[c], mean[c], 1e-12);
    EXPECT_NEAR(stats.std[c], sd[c], 1e-12);
  }
  // The validation loader normalises with the training statistics it is given; NCHW order.
  const ImageLoader loader(valid, lab3, 3, 1, {.normalize = stats});
  const Batch b = eval_batch(loader, 0, 3, 0, 3);
  for (int i = 0; i < 3; ++i)
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) {
          const double v = valid.image(i)[(y * W + x) * C + c] / 255.0;
          EXPECT_NEAR(b.images[((i * C + c) * H + y) * W + x], (v - mean[c]) / sd[c], 1e-5);
        }
}

// What crop_flip promises for output pixel (c, y, x) of a crop: the padded image's pixel, padding
// being pixel value 0.
int expected_pixel(const IdxImages& img, int64_t item, CropFlip crop, int c, int y, int x) {
  const int H = img.height(), W = img.width(), C = img.channels();
  const int sy = y + crop.dy - 4, sx = (crop.flip ? W - 1 - x : x) + crop.dx - 4;
  if (sy < 0 || sy >= H || sx < 0 || sx >= W) return 0;
  return img.image(item)[(sy * W + sx) * C + c];
}

TEST_F(ImageDataTest, CropFlipMovesTheImageAsDrawn) {
  // One hand-made image, pixel (y, x, c) = 1 + (y·W + x)·C + c (all distinct, none 0), so every
  // output pixel says where it came from. N = 1: sample s of the stream is item 0 in epoch s.
  const int H = 6, W = 9, C = 2;
  Bytes pixels(H * W * C);
  for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<uint8_t>(1 + k);
  write_file(dir_ / "img", idx_file({1, H, W, C}, pixels));
  write_file(dir_ / "lab", idx_file({1}, Bytes{3}));
  const IdxImages img = IdxImages::open(path("img"));
  const IdxLabels lab = IdxLabels::open(path("lab"));
  const uint64_t seed = 42;
  const ChannelStats stats = ChannelStats::of(img);
  const ImageLoader plain(img, lab, 1, seed, {.augment = Augment::CROP_FLIP});
  const ImageLoader normalised(img, lab, 1, seed,
                               {.normalize = stats, .augment = Augment::CROP_FLIP});
  std::set<int> flips, dys, dxs;
  for (int64_t step = 0; step < 64; ++step) {
    const CropFlip crop = crop_flip_draw(seed, step, 0);
    flips.insert(crop.flip);
    dys.insert(crop.dy);
    dxs.insert(crop.dx);
    const Batch p = train_batch(plain, step, 0, 1), n = train_batch(normalised, step, 0, 1);
    EXPECT_EQ(p, train_batch(plain, step, 0, 1));  // deterministic
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) {
          const int v = expected_pixel(img, 0, crop, c, y, x);
          const size_t k = (c * H + y) * W + x;
          ASSERT_EQ(p.images[k], static_cast<float>(v / 255.0))
              << "step " << step << " dy " << crop.dy << " dx " << crop.dx << " flip " << crop.flip;
          ASSERT_NEAR(n.images[k], (v / 255.0 - stats.mean[c]) / stats.std[c], 1e-5);
        }
  }
  EXPECT_EQ(flips.size(), 2u);
  EXPECT_GE(dys.size(), 5u);
  EXPECT_GE(dxs.size(), 5u);
}

TEST(CropFlipDraw, OffsetsUniformOverNinePositionsAndFlipsHalfTheTime) {
  const int draws = 90000;
  std::vector<int> dy(9), dx(9);
  int flips = 0;
  for (int item = 0; item < draws; ++item) {
    const CropFlip c = crop_flip_draw(5, 3, item);
    ASSERT_TRUE(c.dy >= 0 && c.dy <= 8 && c.dx >= 0 && c.dx <= 8);
    ++dy[c.dy];
    ++dx[c.dx];
    flips += c.flip;
  }
  // Binomial counts: 5 standard deviations.
  const double p = 1.0 / 9, tol = 5 * std::sqrt(draws * p * (1 - p));
  for (int k = 0; k < 9; ++k) {
    EXPECT_NEAR(dy[k], draws * p, tol) << k;
    EXPECT_NEAR(dx[k], draws * p, tol) << k;
  }
  EXPECT_NEAR(flips, draws / 2.0, 5 * std::sqrt(draws * 0.25));
}

TEST(CropFlipDraw, DeterministicAndKeyedBySeedEpochAndItem) {
  auto same = [](CropFlip a, CropFlip b) {
    return a.dy == b.dy && a.dx == b.dx && a.flip == b.flip;
  };
  int seed_differs = 0, epoch_differs = 0, item_differs = 0;
  for (int item = 0; item < 100; ++item) {
    EXPECT_TRUE(same(crop_flip_draw(5, 3, item), crop_flip_draw(5, 3, item)));
    seed_differs += !same(crop_flip_draw(5, 3, item), crop_flip_draw(6, 3, item));
    epoch_differs += !same(crop_flip_draw(5, 3, item), crop_flip_draw(5, 4, item));
    item_differs += !same(crop_flip_draw(5, 3, item), crop_flip_draw(5, 3, item + 100));
  }
  // Independent draws agree with probability 1/162: about 1 in 100.
  EXPECT_GT(seed_differs, 90);
  EXPECT_GT(epoch_differs, 90);
  EXPECT_GT(item_differs, 90);
}

// ---- synthetic images -----------------------------------------------------------------------

TEST(SyntheticImages, PureStandardisedAndLabelledInRange) {
  const SyntheticImages s(3, 32, 32, 10, 9);
  const int rows = 64;
  const Batch full = train_batch(s, 4, 0, rows);
  EXPECT_EQ(full, train_batch(SyntheticImages(3, 32, 32, 10, 9), 4, 0, rows));
  Batch joined = train_batch(s, 4, 0, 20), rest = train_batch(s, 4, 20, rows - 20);
  joined.images.insert(joined.images.end(), rest.images.begin(), rest.images.end());
  joined.labels.insert(joined.labels.end(), rest.labels.begin(), rest.labels.end());
  EXPECT_EQ(joined, full);
  EXPECT_NE(train_batch(s, 5, 0, rows), full);
  EXPECT_NE(train_batch(SyntheticImages(3, 32, 32, 10, 10), 4, 0, rows), full);
  EXPECT_NE(eval_batch(s, 4, rows, 0, rows), full);
  // Mean 0, variance 1 within 5 standard errors (Irwin-Hall(4) has kurtosis 2.7).
  const double n = double(full.images.size());
  double sum = 0, squares = 0;
  for (float v : full.images) sum += v;
  const double mean = sum / n;
  for (float v : full.images) squares += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0.0, 5 / std::sqrt(n));
  EXPECT_NEAR(squares / n, 1.0, 5 * std::sqrt(1.7 / n));
  std::set<int32_t> classes;
  for (int step = 0; step < 8; ++step)
    for (int32_t l : train_batch(s, step, 0, rows).labels) {
      EXPECT_TRUE(l >= 0 && l < 10) << l;
      classes.insert(l);
    }
  EXPECT_EQ(classes.size(), 10u);
  // ImageNet's shape, 3×224×224 per sample; 8 of them (1.2M floats) are written by threads, and
  // each equals the same row written alone.
  const SyntheticImages imagenet(3, 224, 224, 1000, 1);
  const Batch big = train_batch(imagenet, 3, 0, 8);
  ASSERT_EQ(big.images.size(), 8u * 3 * 224 * 224);
  const Batch row5 = train_batch(imagenet, 3, 5, 1);
  EXPECT_TRUE(
      std::equal(row5.images.begin(), row5.images.end(), big.images.begin() + 5 * 3 * 224 * 224));
  EXPECT_EQ(row5.labels[0], big.labels[5]);
  expect_error([] { SyntheticImages(0, 224, 224, 1000, 1); }, {"positive sizes"},
               "model.in_channels");
}

// ---- Fashion-MNIST as Debian ships it --------------------------------------------------------

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

TEST_F(ImageDataTest, DebianFashionMnist) {
  if (!fs::exists(kFashion))
    GTEST_SKIP() << "skipped: " << kFashion << " not installed (apt install dataset-fashion-mnist)";
  for (const auto& [split, count] : {std::pair{"train", 60000}, std::pair{"t10k", 10000}}) {
    const std::string images_path = kFashion + "/" + split + "-images-idx3-ubyte.gz";
    const std::string labels_path = kFashion + "/" + split + "-labels-idx1-ubyte.gz";
    const IdxImages images = IdxImages::open(images_path);
    const IdxLabels labels = IdxLabels::open(labels_path);
    EXPECT_EQ(images.count(), count);
    EXPECT_EQ(labels.count(), count);
    EXPECT_EQ(images.height(), 28);
    EXPECT_EQ(images.width(), 28);
    EXPECT_EQ(images.channels(), 1);
    EXPECT_LT(labels.max_label(), 10);
    EXPECT_NO_THROW(check_images_match_model(images, labels, 28, 1, 10));
    // The first label and the first image, read with zlib straight from the .gz files (headers
    // of 8 and 16 bytes).
    const Bytes label_head = gunzip_prefix(labels_path, 9);
    const Bytes image_head = gunzip_prefix(images_path, 16 + 784);
    ASSERT_EQ(label_head.size(), 9u);
    ASSERT_EQ(image_head.size(), 16u + 784);
    EXPECT_EQ(labels[0], label_head[8]);
    EXPECT_TRUE(std::equal(images.image(0), images.image(0) + 784, image_head.begin() + 16));
  }
}

TEST_F(ImageDataTest, FashionMnistBatchOf128IsAssembledInMilliseconds) {
  if (!fs::exists(kFashion))
    GTEST_SKIP() << "skipped: " << kFashion << " not installed (apt install dataset-fashion-mnist)";
  const IdxImages images = IdxImages::open(kFashion + "/train-images-idx3-ubyte.gz");
  const IdxLabels labels = IdxLabels::open(kFashion + "/train-labels-idx1-ubyte.gz");
  const auto t0 = std::chrono::steady_clock::now();
  const ChannelStats stats = ChannelStats::of(images);
  const double stats_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const int G = 128;
  const ImageLoader loader(images, labels, G, 1,
                           {.normalize = stats, .augment = Augment::CROP_FLIP});
  Batch b(G, loader.sample_floats());
  std::vector<double> ms;
  for (int step = 0; step < 51; ++step) {
    const auto s = std::chrono::steady_clock::now();
    loader.train_rows(step, 0, G, b.images.data(), b.labels.data());
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "[ timing ] Fashion-MNIST: channel statistics of 60000 images %.1f ms; a 128-image "
      "batch (normalise + crop_flip) median %.3f ms, min %.3f ms, max %.3f ms\n",
      stats_ms, ms[ms.size() / 2], ms.front(), ms.back());
  // A ResNet step on 28-pixel images takes milliseconds: assembly must stay well below that.
  EXPECT_LT(ms[ms.size() / 2], 5.0);
}

}  // namespace
}  // namespace baton
