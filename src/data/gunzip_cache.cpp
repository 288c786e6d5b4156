// gzip files decompressed once into the cache directory (see gunzip_cache.h). Decompression is
// zlib's inflate over the mapped source, written through a temporary file that is fsynced and
// renamed, so the copy under the final name is always whole.
#include "data/gunzip_cache.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

// Bumped when the cache's contents or naming change, so old copies are not mistaken for new ones.
constexpr uint64_t kCacheVersion = 1;
constexpr const char* kCacheHint =
    "set BATON_CACHE_DIR to a writable directory with room for the decompressed data";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// Streams the inflated bytes of `gz` into `out`. Concatenated gzip members are decompressed one
// after the other, as gunzip does.
void inflate_into(const MappedFile& gz, const std::string& source, std::FILE* out,
                  const std::string& out_path) {
  const auto damaged = [&](const std::string& why) {
    return Error(fmt::format("{} is a damaged gzip file: {}", source, why),
                 "download the file again or reinstall its package (`gzip -t FILE` checks it)");
  };
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK)  // 15-bit window, gzip wrapper
    throw Error("zlib could not start decompressing " + source, "out of memory?");
  std::vector<unsigned char> buffer(size_t{1} << 20);
  const uint8_t* in = gz.data();
  size_t left = gz.size();
  try {
    for (;;) {
      if (zs.avail_in == 0 && left > 0) {
        // avail_in is 32-bit: feed a huge source in pieces.
        const size_t piece = std::min<size_t>(left, size_t{1} << 30);
        zs.next_in = const_cast<Bytef*>(in);
        zs.avail_in = static_cast<uInt>(piece);
        in += piece;
        left -= piece;
      }
      zs.next_out = buffer.data();
      zs.avail_out = static_cast<uInt>(buffer.size());
      const int rc = inflate(&zs, Z_NO_FLUSH);
      if (rc == Z_MEM_ERROR) throw Error("out of memory decompressing " + source, "free memory");
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
        throw damaged(zs.msg ? zs.msg : "invalid compressed data");
      const size_t produced = buffer.size() - zs.avail_out;
      if (produced && std::fwrite(buffer.data(), 1, produced, out) != produced)
        throw Error(fmt::format("cannot write {}: {}", out_path, std::strerror(errno)), kCacheHint);
      const bool input_done = zs.avail_in == 0 && left == 0;
      if (rc == Z_STREAM_END) {
        if (input_done) break;
        inflateReset(&zs);  // another gzip member follows
        continue;
      }
      // inflate stops when the output is full or the input is used up; room left over with no
      // input left means the stream was cut short.
      if (input_done && zs.avail_out != 0)
        throw damaged("it ends before the end of its compressed stream (truncated)");
    }
  } catch (...) {
    inflateEnd(&zs);
    throw;
  }
  inflateEnd(&zs);
}

// Decompresses into a temporary file beside `target`, then renames it to `target`.
void gunzip_to(const MappedFile& gz, const std::string& source, const std::string& target) {
  const fs::path dir = fs::path(target).parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw Error(fmt::format("cannot create the cache directory {}: {}", dir.string(), ec.message()),
                kCacheHint);
  // pid + clock: two processes (ranks on one node) never share a temporary name.
  const uint64_t tag =
      mix({static_cast<uint64_t>(::getpid()),
           static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())});
  const std::string tmp = fmt::format("{}.tmp.{:016x}", target, tag);
  std::FILE* out = std::fopen(tmp.c_str(), "wb");
  if (!out) throw Error(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)), kCacheHint);
  try {
    inflate_into(gz, source, out, tmp);
    // fsync before rename: after a power loss the final name holds the whole copy or nothing.
    if (std::fflush(out) != 0 || ::fsync(::fileno(out)) != 0)
      throw Error(fmt::format("cannot write {}: {}", tmp, std::strerror(errno)), kCacheHint);
  } catch (...) {
    std::fclose(out);
    std::remove(tmp.c_str());
    throw;
  }
  const bool closed = std::fclose(out) == 0;
  if (!closed || std::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error(fmt::format("cannot write the cache file {}: {}", target, why), kCacheHint);
  }
}

}  // namespace

bool is_gzip(const MappedFile& file) {
  return file.size() >= 2 && file.data()[0] == 0x1f && file.data()[1] == 0x8b;
}

std::string cache_dir() {
  if (const std::string dir = env("BATON_CACHE_DIR"); !dir.empty()) return dir;
  if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/baton";
  if (const std::string home = env("HOME"); !home.empty()) return home + "/.cache/baton";
  throw Error(
      "no cache directory for decompressed datasets: BATON_CACHE_DIR, XDG_CACHE_HOME and "
      "HOME are all unset",
      "set BATON_CACHE_DIR to a writable directory (or decompress the .gz files yourself)");
}

std::string gunzip_cache_path(const std::string& source) {
  struct stat st {};
  if (::stat(source.c_str(), &st) != 0)
    throw Error(fmt::format("cannot stat {}: {}", source, std::strerror(errno)), "check the file");
  const std::string abs = fs::absolute(source).lexically_normal().string();
  const uint64_t h =
      mix({kCacheVersion, hash_string(abs), static_cast<uint64_t>(st.st_size),
           static_cast<uint64_t>(st.st_mtim.tv_sec), static_cast<uint64_t>(st.st_mtim.tv_nsec)});
  std::string name = fs::path(source).filename().string();
  if (name.size() > 3 && name.ends_with(".gz")) name.resize(name.size() - 3);
  return fmt::format("{}/{}-{:016x}", cache_dir(), name, h);
}

MappedFile map_gunzipped(const MappedFile& gz, const std::string& source,
                         const std::function<bool(const MappedFile&)>& complete) {
  const std::string target = gunzip_cache_path(source);
  const std::string hint = "the cache copy vanished while in use; run again";
  if (fs::exists(target)) {
    MappedFile copy(target, hint);
    if (complete(copy)) return copy;
  }
  gunzip_to(gz, source, target);
  return MappedFile(target, hint);
}

}  // namespace baton
