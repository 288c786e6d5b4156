// The metadata of a checkpoint as attributes of the file's root group (h5py: `f.attrs`), and the
// per-dataset `checksum` attribute. Names and types are part of the format (docs/checkpoints.md).
#pragma once
#include <hdf5.h>

#include <string>

#include "train/checkpoint/checkpoint.h"

namespace baton {

inline constexpr const char* kChecksumAttr = "checksum";  // uint64 on every tensor dataset
inline constexpr const char* kMetaChecksumAttr = "meta_checksum";  // uint64 on the root group

void write_meta_attrs(hid_t root, const CheckpointMeta& meta);
// Throws Error naming `path` for a missing format marker or an unsupported format version, and
// CheckpointDamaged for a missing attribute (the file is not a complete baton checkpoint) or
// metadata that do not match their `meta_checksum` (absent in files of older batons: a warning).
CheckpointMeta read_meta_attrs(hid_t root, const std::string& path);

}  // namespace baton
