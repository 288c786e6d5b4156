#include "train/checkpoint/checkpoint_h5.h"

#include <mutex>
#include <vector>

#include "core/error.h"

namespace baton::h5 {

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Files are closed by their handles; HDF5's own cleanup at exit, after a failed write (a full
    // disk), closed a half-written dataset again and crashed the process (exit 139).
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

std::string last_error() {
  // The stack lists the failing API call first and its root cause last; the root cause is the
  // most useful line ("truncated file", "file signature not found", ...).
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD,
           [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
             if (n == 0 && e->desc) *static_cast<std::string*>(data) = e->desc;
             return 0;
           },
           &msg);
  H5Eclear2(H5E_DEFAULT);
  // A failed write's description spans lines ("file write failed: time = ..., errno = 28, error
  // message = 'No space left on device', ..."): keep the system's message, on one line.
  if (const size_t at = msg.find("error message = '"); at != std::string::npos) {
    const size_t from = at + 17, to = msg.find('\'', from);
    if (to != std::string::npos) return msg.substr(0, msg.find(':')) + ": " + msg.substr(from, to - from);
  }
  for (char& c : msg)
    if (c == '\n') c = ' ';
  return msg;
}

bool Handle::reset() {
  if (id_ < 0) return true;
  const herr_t rc = H5Iget_type(id_) == H5I_FILE ? H5Fclose(id_) : H5Idec_ref(id_);
  id_ = H5I_INVALID_HID;
  return rc >= 0;
}

BoxSpaces box_spaces(hid_t dataset, std::span<const int64_t> offset, std::span<const int64_t> extent) {
  const std::vector<hsize_t> start(offset.begin(), offset.end()), count(extent.begin(), extent.end());
  BoxSpaces b{Handle(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr)),
              Handle(H5Dget_space(dataset))};
  H5Sselect_hyperslab(b.file.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
  return b;
}

namespace {

void write_scalar(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* value) {
  Handle space(H5Screate(H5S_SCALAR));
  Handle attr(H5Acreate2(obj, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  BATON_ASSERT(attr.valid() && H5Awrite(attr.get(), mem_type, value) >= 0,
               "cannot write HDF5 attribute '{}': {}", name, last_error());
}

Handle string_type() {
  Handle t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

// Opens attribute `name` if it exists and its type is of class `cls`.
Handle open_attr(hid_t obj, const char* name, H5T_class_t cls) {
  if (!has_attr(obj, name)) return Handle();
  Handle attr(H5Aopen(obj, name, H5P_DEFAULT));
  if (!attr.valid()) return Handle();
  Handle type(H5Aget_type(attr.get()));
  if (H5Tget_class(type.get()) != cls) return Handle();
  return attr;
}

template <typename T>
bool read_number(hid_t obj, const char* name, H5T_class_t cls, hid_t mem_type, T& value) {
  Handle attr = open_attr(obj, name, cls);
  return attr.valid() && H5Aread(attr.get(), mem_type, &value) >= 0;
}

}  // namespace

void write_attr(hid_t obj, const char* name, const std::string& value) {
  Handle t = string_type();
  const char* p = value.c_str();
  write_scalar(obj, name, t.get(), t.get(), &p);
}
void write_attr(hid_t obj, const char* name, int64_t value) {
  write_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}
void write_attr(hid_t obj, const char* name, uint64_t value) {
  write_scalar(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}
void write_attr(hid_t obj, const char* name, double value) {
  write_scalar(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

bool has_attr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

bool read_attr(hid_t obj, const char* name, std::string& value) {
  Handle attr = open_attr(obj, name, H5T_STRING);
  if (!attr.valid()) return false;
  Handle ftype(H5Aget_type(attr.get()));
  if (H5Tis_variable_str(ftype.get()) > 0) {
    Handle t = string_type();
    char* p = nullptr;
    if (H5Aread(attr.get(), t.get(), &p) < 0) return false;
    value = p ? p : "";
    H5free_memory(p);
    return true;
  }
  // Fixed-length strings (as other tools may write them).
  const size_t n = H5Tget_size(ftype.get());
  std::vector<char> buf(n + 1, '\0');
  Handle t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), n);
  if (H5Aread(attr.get(), t.get(), buf.data()) < 0) return false;
  value.assign(buf.data());
  return true;
}
bool read_attr(hid_t obj, const char* name, int64_t& value) {
  return read_number(obj, name, H5T_INTEGER, H5T_NATIVE_INT64, value);
}
bool read_attr(hid_t obj, const char* name, uint64_t& value) {
  return read_number(obj, name, H5T_INTEGER, H5T_NATIVE_UINT64, value);
}
bool read_attr(hid_t obj, const char* name, double& value) {
  return read_number(obj, name, H5T_FLOAT, H5T_NATIVE_DOUBLE, value);
}

}  // namespace baton::h5
