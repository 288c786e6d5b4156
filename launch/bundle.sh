#!/usr/bin/env bash
# launch/bundle.sh [BINARY] [OUT] [EXTRA_BINARY...]: a self-contained copy of baton for nodes that
# have only the NVIDIA driver and the CUDA libraries (no Open MPI, HDF5, SentencePiece, OpenBLAS
# packages). OUT/lib gets every shared library the binaries and Open MPI's plugins need, except
# glibc and the NVIDIA/CUDA libraries (those must come from the node, matching its driver);
# OUT/baton is a wrapper that points the loader and Open MPI (OPAL_PREFIX) into the bundle, and
# OUT/run NAME ARGS... runs any bundled binary (e.g. the GPU test programs) the same way.
#   bash launch/bundle.sh build/baton bundle && scp -r bundle node: && ssh node bundle/baton --version
#   bash launch/bundle.sh build/baton bundle build/tests/test_cuda_ops   # + a test binary
set -euo pipefail
BIN=${1:-build/baton}
OUT=${2:-bundle}
[ -x "$BIN" ] || { echo "error: $BIN is not an executable"; echo "hint: build first: cmake --build build"; exit 1; } >&2
command -v ldd >/dev/null || { echo "error: ldd not found" >&2; exit 1; }

# Provided by the node: glibc and the dynamic loader, the NVIDIA driver and the CUDA toolkit libraries.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libcuda\.so|libcudart|libcublas|libnccl|libnvidia|libnvrtc|libcurand|libcusparse)'

MPI_PLUGINS=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
MPI_PLUGINS=${MPI_PLUGINS:-/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3}
MPI_DATA=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
MPI_DATA=${MPI_DATA:-/usr/share/openmpi}

EXTRA=("${@:3}")
for extra in "${EXTRA[@]}"; do [ -x "$extra" ] || { echo "error: $extra is not an executable" >&2; exit 1; }; done
rm -rf "$OUT" && mkdir -p "$OUT/lib" "$OUT/bin"
cp "$BIN" "$OUT/bin/baton"
for extra in "${EXTRA[@]}"; do cp "$extra" "$OUT/bin/"; done

# Libraries of the binary and of every Open MPI plugin (plugins are dlopen'ed, so ldd of the
# binary alone misses their dependencies).
plugin_dir="$OUT${MPI_PLUGINS}"
mkdir -p "$plugin_dir"
cp "$MPI_PLUGINS"/*.so "$plugin_dir/" 2>/dev/null || true
objects=("$BIN" "${EXTRA[@]}" "$plugin_dir"/*.so)
ldd "${objects[@]}" 2>/dev/null | awk '/=> \// {print $1, $3}' | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  [ -e "$OUT/lib/$name" ] || cp -L "$path" "$OUT/lib/$name"
done
# Open MPI's help texts and default parameters (relative to its prefix, found via OPAL_PREFIX).
mkdir -p "$OUT${MPI_DATA}"
cp -r "$MPI_DATA"/. "$OUT${MPI_DATA}/"

cat > "$OUT/baton" <<'SH'
#!/usr/bin/env bash
# baton from a bundle (launch/bundle.sh): libraries from the bundle, CUDA from the node.
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$here/usr"
exec "$here/bin/baton" "$@"
SH
cat > "$OUT/run" <<'SH'
#!/usr/bin/env bash
# run NAME ARGS...: a binary of this bundle (bin/NAME) with the bundle's libraries.
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/bin/${1:-}" ] || { echo "usage: $0 NAME ARGS... (NAME one of: $(ls "$here/bin" | tr '\n' ' '))" >&2; exit 2; }
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$here/usr"
exec "$here/bin/$1" "${@:2}"
SH
chmod +x "$OUT/baton" "$OUT/run"
echo "bundle: $OUT ($(du -sh "$OUT" | cut -f1), $(ls "$OUT/lib" | wc -l) libraries, $(ls "$plugin_dir" | wc -l) Open MPI plugins)"
echo "run: $OUT/baton --version"
