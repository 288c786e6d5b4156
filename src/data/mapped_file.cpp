// Read-only whole-file mappings (see mapped_file.h). An empty file maps to (nullptr, 0): mmap
// refuses zero-length mappings, and readers report an empty file by its size anyway.
#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace baton {

MappedFile::MappedFile(const std::string& path, const std::string& missing_hint) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(fmt::format("cannot open dataset file {}: {}", path, std::strerror(errno)),
                missing_hint);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(fmt::format("cannot stat {}: {}", path, std::strerror(err)), "check the file");
  }
  bytes_ = static_cast<size_t>(st.st_size);
  if (bytes_ > 0) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(fmt::format("cannot memory-map {}: {}", path, std::strerror(err)),
                  "check that the file is a regular file on a local or mmap-capable filesystem");
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), bytes_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), bytes_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

const uint8_t* MappedFile::release() { return std::exchange(data_, nullptr); }

}  // namespace baton
