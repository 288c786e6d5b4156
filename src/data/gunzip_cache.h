// Decompressed copies of gzip files, made once and kept in baton's cache directory, so readers can
// memory-map data that ships compressed (Debian's dataset-fashion-mnist ships .gz files).
//
// Invariants: a cache file is named after the source and a hash of the source's absolute path,
// size and modification time, so an edited or replaced source gets a new copy; it is written under
// a temporary name in the same directory and renamed when complete, so a crash never leaves a
// damaged copy under the final name (and concurrent ranks decompressing at once each rename a
// complete, identical copy); the caller's `complete` predicate decides whether an existing copy
// can be used, and a copy it rejects is rebuilt.
#pragma once
#include <functional>
#include <string>

#include "data/mapped_file.h"

namespace baton {

// True when `file` starts with the gzip magic bytes 1f 8b.
bool is_gzip(const MappedFile& file);

// $BATON_CACHE_DIR, else $XDG_CACHE_HOME/baton, else $HOME/.cache/baton (empty variables count as
// unset). Throws baton::Error when none of them is set.
std::string cache_dir();

// Where the decompressed copy of the file `source` lives (in cache_dir()).
std::string gunzip_cache_path(const std::string& source);

// The decompressed contents of the gzip file `source` (mapped as `gz`), mapped from its cache copy:
// the existing copy when `complete(copy)` accepts it, else a fresh one. Throws baton::Error naming
// `source` when the gzip data is damaged or truncated, and when the cache cannot be written.
MappedFile map_gunzipped(const MappedFile& gz, const std::string& source,
                         const std::function<bool(const MappedFile&)>& complete);

}  // namespace baton
