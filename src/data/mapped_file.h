// A read-only memory mapping of a whole file: how the dataset readers (indexed datasets, IDX
// images) see their data without copying it. The mapping lives as long as the object (move-only)
// or until release() hands it to the caller; a missing or unmappable file is a baton::Error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace baton {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path`. `missing_hint` is the hint when the file cannot be opened: only the caller knows
  // which setting names the file.
  MappedFile(const std::string& path, const std::string& missing_hint);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }
  // Gives up ownership: the caller munmaps (data(), size()) itself.
  const uint8_t* release();

 private:
  const uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace baton
