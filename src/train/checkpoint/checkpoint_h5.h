// Thin helpers over the HDF5 C API for the checkpoint reader and writer: an owning handle, error
// text taken from HDF5's error stack (HDF5's own stderr printing is switched off, so users see one
// baton error instead of a stack dump), and typed scalar attributes. Attribute types are the
// little-endian standard ones h5py maps to numpy (int64, uint64, float64, UTF-8 variable strings).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace baton::h5 {

// Silences HDF5's automatic error printing (idempotent); call before any HDF5 use.
void init();

// The innermost message on HDF5's error stack, e.g. "truncated file: eof = 4096, ...", or "".
std::string last_error();

// Owns one HDF5 identifier of any kind (file, group, dataset, dataspace, type, attribute, plist).
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  // Closes now; returns false when HDF5 reports an error (for a file: the final flush failed).
  bool reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// The dataspaces for transferring the box at `offset` with `extent` of `dataset`: a memory space of
// the box's shape and the dataset's file space with the box selected as a hyperslab.
struct BoxSpaces {
  Handle memory, file;
};
BoxSpaces box_spaces(hid_t dataset, std::span<const int64_t> offset, std::span<const int64_t> extent);

void write_attr(hid_t obj, const char* name, const std::string& value);
void write_attr(hid_t obj, const char* name, int64_t value);
void write_attr(hid_t obj, const char* name, uint64_t value);
void write_attr(hid_t obj, const char* name, double value);

bool has_attr(hid_t obj, const char* name);
// Readers return false when the attribute is missing or has another type class.
bool read_attr(hid_t obj, const char* name, std::string& value);
bool read_attr(hid_t obj, const char* name, int64_t& value);
bool read_attr(hid_t obj, const char* name, uint64_t& value);
bool read_attr(hid_t obj, const char* name, double& value);

}  // namespace baton::h5
