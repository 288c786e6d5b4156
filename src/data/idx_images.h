// IDX files, the format of MNIST and Fashion-MNIST: a big-endian int32 magic 0x0000TTDD (TT the
// element type, 08 = uint8; DD the number of dimensions), DD big-endian int32 dimensions, then the
// elements in row-major order. baton reads uint8 images, magic 0x00000803 (N×H×W, one channel)
// or 0x00000804 (N×H×W×C, channels last), and uint8 labels, magic 0x00000801 (N).
//
// Files may be gzipped (detected by their first bytes, whatever their name): they are decompressed
// once into the cache (data/gunzip_cache.h) and the copy is used; a cached copy whose size does not
// match its header is rebuilt. Either way the bytes are memory-mapped, not read.
//
// Invariants after open(): the magic is the one asked for, and the file holds exactly the header
// and the elements its dimensions promise, so element accessors need no checks. Errors name the
// file the user gave (the .gz, not the cache copy) and say how to fix it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/mapped_file.h"

namespace baton {

// One mapped IDX file of uint8 elements.
struct IdxFile {
  std::string path;           // as the user named it
  std::vector<int64_t> dims;  // from the header
  const uint8_t* elements = nullptr;
  MappedFile mapping;  // the file itself or its decompressed cache copy
};

class IdxImages {
 public:
  // Throws baton::Error: missing file, not IDX images (bad magic), truncated or damaged, damaged
  // gzip data, cache not writable.
  static IdxImages open(const std::string& path);

  const std::string& path() const { return file_.path; }
  int64_t count() const { return file_.dims[0]; }
  int height() const { return static_cast<int>(file_.dims[1]); }
  int width() const { return static_cast<int>(file_.dims[2]); }
  int channels() const { return file_.dims.size() == 4 ? static_cast<int>(file_.dims[3]) : 1; }
  // Bytes of one image: height × width × channels.
  size_t image_bytes() const;
  // Image i as the file stores it: [height, width, channels] (channels last).
  const uint8_t* image(int64_t i) const;

 private:
  IdxFile file_;
};

class IdxLabels {
 public:
  // Throws baton::Error as IdxImages::open does (for a labels file).
  static IdxLabels open(const std::string& path);

  const std::string& path() const { return file_.path; }
  int64_t count() const { return file_.dims[0]; }
  uint8_t operator[](int64_t i) const { return file_.elements[i]; }
  // Largest label present, -1 when there are none.
  int max_label() const { return max_label_; }

 private:
  IdxFile file_;
  int max_label_ = -1;
};

}  // namespace baton
