// ImageFolderSource (see image_folder.h): the folder scan, libjpeg-turbo decoding, PIL's resampling
// and torchvision's transforms. Every sample is computed from (seed, its stream index) alone.
#include "data/image_folder.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/rng.h"
#include "data/permutation.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

// The same shuffle tag as ImageLoader: an image folder and an IDX file of the same items in the
// same order are read in the same order.
const uint64_t kShuffleTag = hash_string("baton image shuffle");
const uint64_t kResizedCropTag = hash_string("baton image random_resized_crop");

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool is_jpeg_name(const std::string& name) {
  const std::string l = lower(name);
  return ends_with(l, ".jpg") || ends_with(l, ".jpeg");
}
// torchvision's other IMG_EXTENSIONS: ImageFolder would read them, baton cannot.
bool is_other_image_name(const std::string& name) {
  const std::string l = lower(name);
  for (const char* e : {".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"})
    if (ends_with(l, e)) return true;
  return false;
}

// PIL's fixed point (libImaging/Resample.c): 32 - 8 - 2 bits.
constexpr int kPrecisionBits = 32 - 8 - 2;

uint8_t clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

double bilinear(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// PIL's precompute_coeffs + normalize_coeffs_8bpc for the bilinear filter (support 1) over the
// whole input [0, in_size): per output pixel the first input index, the tap count and ksize
// integer weights.
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> k;
};
Coeffs coefficients(int in_size, int out_size) {
  const double in0 = 0, in1 = static_cast<float>(in_size);  // PIL's box is float
  const double scale = (in1 - in0) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.k.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = bilinear((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      c.k[static_cast<size_t>(xx) * c.ksize + x] =
          v < 0 ? static_cast<int32_t>(-0.5 + v * (1 << kPrecisionBits))
                : static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

Image8 crop(const Image8& in, int top, int left, int h, int w) {
  Image8 out{.width = w, .height = h, .channels = in.channels, .pixels = {}};
  out.pixels.resize(static_cast<size_t>(w) * h * in.channels);
  for (int y = 0; y < h; ++y)
    std::copy_n(in.row(top + y) + static_cast<size_t>(left) * in.channels, static_cast<size_t>(w) * in.channels,
                out.pixels.data() + static_cast<size_t>(y) * w * in.channels);
  return out;
}

// torchvision's Resize(size) for one int: the shorter side becomes `size`, the longer
// int(size · long / short).
Image8 resize_shorter(const Image8& in, int size) {
  const int w = in.width, h = in.height;
  const int short_side = std::min(w, h), long_side = std::max(w, h);
  const int new_long = static_cast<int>(static_cast<double>(size) * long_side / short_side);
  const int new_w = w <= h ? size : new_long, new_h = w <= h ? new_long : size;
  if (new_w == w && new_h == h) return in;
  return resize_bilinear(in, new_w, new_h);
}

// Python's round(): halves to even (the default floating-point rounding mode).
int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

}  // namespace

ImageFolderIndex ImageFolderIndex::scan(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw Error(fmt::format("{} is not a directory", root),
                "data.format = \"image_folder\": data.train / data.valid name folders root/<class>/*.jpg");
  ImageFolderIndex index;
  index.root = root;
  for (const fs::directory_entry& e : fs::directory_iterator(root))
    if (e.is_directory()) index.classes.push_back(e.path().filename().string());
  std::sort(index.classes.begin(), index.classes.end());
  if (index.classes.empty())
    throw Error(fmt::format("{} has no class sub-folders", root),
                "put each class's images in its own folder: root/<class>/*.jpg");
  for (size_t c = 0; c < index.classes.size(); ++c) {
    // os.walk sorted by directory, files sorted within one: sort (directory, name) pairs.
    std::vector<std::pair<std::string, std::string>> found;
    const fs::path dir = fs::path(root) / index.classes[c];
    for (const fs::directory_entry& e :
         fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink)) {
      if (!e.is_regular_file()) continue;
      const std::string name = e.path().filename().string();
      if (is_other_image_name(name))
        throw Error(fmt::format("{} is not a JPEG file: baton's image folders hold JPEG images only",
                                e.path().string()),
                    "convert the images to JPEG (.jpg / .jpeg), or remove the file");
      if (is_jpeg_name(name)) found.emplace_back(e.path().parent_path().string(), name);
    }
    if (found.empty())
      throw Error(fmt::format("class folder {} holds no JPEG files (.jpg, .jpeg)", dir.string()),
                  "every class folder needs images (torchvision's ImageFolder refuses empty classes too)");
    std::sort(found.begin(), found.end());
    for (const auto& [d, name] : found) {
      index.files.push_back((fs::path(d) / name).string());
      index.labels.push_back(static_cast<int32_t>(c));
    }
  }
  return index;
}

Image8 decode_jpeg(const std::string& path, int channels) {
  BATON_ASSERT(channels == 1 || channels == 3, "decode to {} channels", channels);
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("cannot read {}", path), "check that the image file exists and is readable");
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  thread_local TjHandle tj;
  BATON_REQUIRE(tj.h != nullptr, "libjpeg-turbo could not create a decompressor", "reinstall libturbojpeg0");
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.h, bytes.data(), bytes.size(), &w, &h, &subsamp, &colorspace) != 0)
    throw Error(fmt::format("{} is not a readable JPEG file: {}", path, tjGetErrorStr2(tj.h)),
                "re-encode or remove the file");
  Image8 img{.width = w, .height = h, .channels = channels, .pixels = {}};
  img.pixels.resize(static_cast<size_t>(w) * h * channels);
  // Flags 0: accurate integer DCT and fancy upsampling, PIL's (libjpeg's) defaults.
  if (tjDecompress2(tj.h, bytes.data(), bytes.size(), img.pixels.data(), w, 0, h,
                    channels == 1 ? TJPF_GRAY : TJPF_RGB, 0) != 0 &&
      tjGetErrorCode(tj.h) == TJERR_FATAL)
    throw Error(fmt::format("cannot decode {}: {}", path, tjGetErrorStr2(tj.h)), "re-encode or remove the file");
  return img;
}

Image8 resize_bilinear(const Image8& in, int out_w, int out_h) {
  const int C = in.channels;
  const bool need_h = out_w != in.width, need_v = out_h != in.height;
  if (!need_h && !need_v) return in;
  Image8 tmp;
  const Image8* src = &in;
  const Coeffs cv = coefficients(in.height, out_h);
  if (need_h) {
    // Only the rows the vertical pass reads.
    const int y0 = cv.first[0], y1 = cv.first[out_h - 1] + cv.count[out_h - 1];
    const Coeffs ch = coefficients(in.width, out_w);
    tmp = Image8{.width = out_w, .height = in.height, .channels = C, .pixels = {}};
    tmp.pixels.assign(static_cast<size_t>(out_w) * in.height * C, 0);
    for (int y = y0; y < y1; ++y) {
      const uint8_t* row = in.row(y);
      uint8_t* dst = tmp.pixels.data() + static_cast<size_t>(y) * out_w * C;
      for (int xx = 0; xx < out_w; ++xx) {
        const int32_t* k = &ch.k[static_cast<size_t>(xx) * ch.ksize];
        const int x0 = ch.first[xx];
        for (int c = 0; c < C; ++c) {
          int32_t ss = 1 << (kPrecisionBits - 1);
          for (int x = 0; x < ch.count[xx]; ++x) ss += row[(x0 + x) * C + c] * k[x];
          dst[xx * C + c] = clip8(ss);
        }
      }
    }
    src = &tmp;
  }
  if (!need_v) return tmp;
  Image8 out{.width = src->width, .height = out_h, .channels = C, .pixels = {}};
  out.pixels.resize(static_cast<size_t>(src->width) * out_h * C);
  const size_t stride = static_cast<size_t>(src->width) * C;
  for (int yy = 0; yy < out_h; ++yy) {
    const int32_t* k = &cv.k[static_cast<size_t>(yy) * cv.ksize];
    const uint8_t* base = src->pixels.data() + static_cast<size_t>(cv.first[yy]) * stride;
    uint8_t* dst = out.pixels.data() + static_cast<size_t>(yy) * stride;
    for (size_t i = 0; i < stride; ++i) {
      int32_t ss = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < cv.count[yy]; ++y) ss += base[static_cast<size_t>(y) * stride + i] * k[y];
      dst[i] = clip8(ss);
    }
  }
  return out;
}

ResizedCrop random_resized_crop_draw(uint64_t seed, int64_t epoch, int64_t item, int height, int width) {
  Rng rng(mix({seed, kResizedCropTag, static_cast<uint64_t>(epoch), static_cast<uint64_t>(item)}));
  auto uniform = [&](double lo, double hi) {
    return lo + (hi - lo) * (static_cast<double>(rng.next_u64() >> 11) * (1.0 / 9007199254740992.0));
  };
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(3.0 / 4.0), log_hi = std::log(4.0 / 3.0);
  ResizedCrop r;
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target = area * uniform(0.08, 1.0);
    const double aspect = std::exp(uniform(log_lo, log_hi));
    const int w = round_half_even(std::sqrt(target * aspect));
    const int h = round_half_even(std::sqrt(target / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      r.height = h;
      r.width = w;
      r.top = static_cast<int>(rng.below(static_cast<uint64_t>(height - h + 1)));
      r.left = static_cast<int>(rng.below(static_cast<uint64_t>(width - w + 1)));
      found = true;
    }
  }
  if (!found) {  // torchvision's fallback: the centre crop of the ratio range nearest the image's
    const double in_ratio = static_cast<double>(width) / height;
    if (in_ratio < 3.0 / 4.0) {
      r.width = width;
      r.height = round_half_even(width / (3.0 / 4.0));
    } else if (in_ratio > 4.0 / 3.0) {
      r.height = height;
      r.width = round_half_even(height * (4.0 / 3.0));
    } else {
      r.width = width;
      r.height = height;
    }
    r.top = (height - r.height) / 2;
    r.left = (width - r.width) / 2;
  }
  r.flip = (rng.next_u64() >> 63) != 0;
  return r;
}

ImageFolderSource::ImageFolderSource(const ImageFolderIndex& index, int global_batch, uint64_t seed,
                                     ImageFolderOptions options)
    : index_(index), global_batch_(global_batch), seed_(seed), options_(std::move(options)) {
  BATON_REQUIRE(options_.channels == 1 || options_.channels == 3,
                fmt::format("image folders decode to 1 (grey) or 3 (RGB) channels, not model.in_channels = {}",
                            options_.channels),
                "set model.in_channels = 3 (or 1 for grey images)");
  BATON_REQUIRE(!index.files.empty(), fmt::format("{} holds no images", index.root), "use a non-empty folder");
  BATON_REQUIRE(global_batch > 0, fmt::format("global batch {} must be positive", global_batch),
                "set train.global_batch to e.g. 128");
  if (options_.eval_resize == 0) options_.eval_resize = static_cast<int>(std::lround(options_.size * 256.0 / 224.0));
  BATON_REQUIRE(options_.eval_resize >= options_.size,
                fmt::format("validation resize {} is smaller than the crop {}", options_.eval_resize, options_.size),
                "set data.eval_resize >= model.image_size");
}

int64_t ImageFolderSource::stream_item(int64_t i) const {
  BATON_ASSERT(i >= 0, "stream index {} is negative", i);
  const int64_t n = size();
  return Permutation(n, mix({seed_, kShuffleTag, static_cast<uint64_t>(i / n)}))(i % n);
}

void ImageFolderSource::to_floats(const Image8& img, bool flip, float* out) const {
  const int C = options_.channels, S = options_.size;
  BATON_ASSERT(img.width == S && img.height == S && img.channels == C, "transformed image {}×{}×{}", img.width,
               img.height, img.channels);
  for (int c = 0; c < C; ++c) {
    const bool norm = !options_.mean.empty();
    const float mean = norm ? static_cast<float>(options_.mean[c]) : 0.f;
    const float stdev = norm ? static_cast<float>(options_.std[c]) : 1.f;
    for (int y = 0; y < S; ++y) {
      const uint8_t* row = img.row(y);
      float* dst = out + (static_cast<size_t>(c) * S + y) * S;
      for (int x = 0; x < S; ++x) {
        const float v = static_cast<float>(row[(flip ? S - 1 - x : x) * C + c]) / 255.f;  // ToTensor
        dst[x] = norm ? (v - mean) / stdev : v;                                              // Normalize
      }
    }
  }
}

void ImageFolderSource::write_eval(int64_t item, float* out) const {
  const Image8 resized = resize_shorter(decode_jpeg(index_.files[item], options_.channels), options_.eval_resize);
  const int S = options_.size;
  BATON_REQUIRE(resized.width >= S && resized.height >= S,
                fmt::format("{} resized to {}×{} is smaller than the crop {}", index_.files[item], resized.width,
                            resized.height, S),
                "set data.eval_resize >= model.image_size");
  const int top = round_half_even((resized.height - S) / 2.0), left = round_half_even((resized.width - S) / 2.0);
  to_floats(crop(resized, top, left, S, S), false, out);
}

void ImageFolderSource::train_sample(int64_t step, int row, float* image, int32_t* label) const {
  const int64_t sample = step * global_batch_ + row;
  const int64_t item = stream_item(sample);
  *label = index_.labels[item];
  if (!options_.augment) {
    write_eval(item, image);
    return;
  }
  const Image8 img = decode_jpeg(index_.files[item], options_.channels);
  const ResizedCrop r = random_resized_crop_draw(seed_, sample / size(), item, img.height, img.width);
  to_floats(resize_bilinear(crop(img, r.top, r.left, r.height, r.width), options_.size, options_.size), r.flip,
            image);
}

void ImageFolderSource::eval_sample(int64_t index, float* image, int32_t* label) const {
  const int64_t item = index % size();
  write_eval(item, image);
  *label = index_.labels[item];
}

double decode_rate(const ImageFolderSource& source, int64_t max_images) {
  std::vector<float> out(source.sample_floats());
  const auto start = std::chrono::steady_clock::now();
  int64_t done = 0;
  double seconds = 0;
  for (; done < std::min(max_images, source.size()) && seconds < 0.25; ++done) {
    source.write_eval(done, out.data());
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
}

}  // namespace baton
