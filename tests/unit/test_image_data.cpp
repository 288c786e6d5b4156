// Image data: IDX files written here byte by byte (raw and gzipped with zlib's own gzwrite) read
// back exactly; the decompression cache (made once, rebuilt when short or long); every error a
// user can cause, checked for its message and its hint; and Debian's Fashion-MNIST when it is
// installed (expected values read with zlib directly).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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

}  // namespace
}  // namespace baton
