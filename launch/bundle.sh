#!/usr/bin/env bash
# launch/bundle.sh [BINARY] [OUT] [EXTRA_BINARY...]: a self-contained copy of baton for nodes that
# have only the NVIDIA driver and the CUDA libraries (no Open MPI, HDF5, SentencePiece, OpenBLAS
# packages). OUT/lib gets every shared library the binaries and Open MPI's plugins need, except
# glibc and the NVIDIA/CUDA libraries (those must come from the node, matching its driver);
# OUT/baton is a wrapper that points the loader and Open MPI (OPAL_PREFIX) into the bundle, and
# OUT/run NAME ARGS... runs any bundled binary (e.g. the GPU test programs) the same way.
# The CUDA libraries the binaries need (OUT/node-libs.txt: cudart, cuBLAS, NCCL, cuDNN) are looked
# for on the node by OUT/node-libs.sh, which both wrappers source: the loader's path first, then the
# CUDA toolkit and Python's site-packages/nvidia/*/lib -- where a PyTorch install keeps cuDNN
# (nvidia/cudnn/lib), which is often not on the loader's path.
#   bash launch/bundle.sh build/baton bundle && scp -r bundle node: && ssh node bundle/baton --version
#   bash launch/bundle.sh build/baton bundle build/tests/test_cuda_ops   # + a test binary
set -euo pipefail
BIN=${1:-build/baton}
OUT=${2:-bundle}
[ -x "$BIN" ] || { echo "error: $BIN is not an executable"; echo "hint: build first: cmake --build build"; exit 1; } >&2
command -v ldd >/dev/null || { echo "error: ldd not found" >&2; exit 1; }

# Provided by the node: glibc and the dynamic loader, the NVIDIA driver and the CUDA toolkit libraries.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libcuda\.so|libcudart|libcublas|libnccl|libcudnn|libnvidia|libnvrtc|libcurand|libcusparse)'
# Of those, the CUDA libraries the binaries link (recorded for node-libs.sh).
node_libs='^(libcudart|libcublas|libnccl|libcudnn)'

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
ldd "${objects[@]}" 2>/dev/null | awk '/=>/ {print $1}' | { grep -E "$node_libs" || true; } | sort -u \
  > "$OUT/node-libs.txt"
# The newest glibc symbol version the programs and libraries need (glibc comes from the node):
# the GPU scripts' preflight compares it with the node's.
. "$(dirname "$0")/lib-gpu-run.sh"
glibc_needed "$OUT"/bin/* "$OUT"/lib/*.so* "$plugin_dir"/*.so > "$OUT/glibc-needed.txt"
# Open MPI's help texts and default parameters (relative to its prefix, found via OPAL_PREFIX).
mkdir -p "$OUT${MPI_DATA}"
cp -r "$MPI_DATA"/. "$OUT${MPI_DATA}/"

cat > "$OUT/node-libs.sh" <<'SH'
# Sourced by the bundle's wrappers (launch/bundle.sh) with $here set: every library named in
# node-libs.txt comes from this node. One the loader cannot see is looked for in the CUDA toolkit
# ($CUDA_HOME, /usr/local/cuda) and in Python's site-packages/nvidia/*/lib (PyTorch's cuDNN, cuBLAS,
# NCCL wheels; $PYTHON or python3), and its folder is appended to LD_LIBRARY_PATH. What is still
# missing is named on stderr (the loader then refuses the program that needs it).
node_lib_visible() {
  local d
  for d in ${LD_LIBRARY_PATH//:/ }; do [ -e "$d/$1" ] && return 0; done
  ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$1 " && return 0
  /sbin/ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$1 "
}
node_lib_dirs() {
  local cuda=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
  echo "$cuda/lib64" "$cuda/lib" /usr/local/cuda/lib64
  "${PYTHON:-python3}" - <<'PY' 2>/dev/null || true
import glob, os, site, sys
roots = [p for p in sys.path if p.endswith("-packages")]
try:
    roots += site.getsitepackages() + [site.getusersitepackages()]
except Exception:
    pass
seen = []
for root in roots:
    for lib in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib"))):
        if lib not in seen:
            seen.append(lib)
print(" ".join(seen))
PY
}
if [ -s "$here/node-libs.txt" ]; then
  node_dirs=""
  node_missing=""
  while read -r lib; do
    node_lib_visible "$lib" && continue
    [ -n "$node_dirs" ] || node_dirs=$(node_lib_dirs)
    found=""
    for d in $node_dirs; do
      if [ -e "$d/$lib" ]; then
        export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
        found=1
        break
      fi
    done
    [ -n "$found" ] || node_missing="$node_missing $lib"
  done < "$here/node-libs.txt"
  if [ -n "$node_missing" ]; then
    echo "bundle: not found on this node:$node_missing (looked on the loader's path, in the CUDA toolkit and in Python's site-packages/nvidia/*/lib)" >&2
    echo "hint: install them (cuDNN 9: NVIDIA's package for this CUDA version, or the nvidia-cudnn wheel PyTorch uses) or add their folder to LD_LIBRARY_PATH" >&2
  fi
fi
SH
cat > "$OUT/baton" <<'SH'
#!/usr/bin/env bash
# baton from a bundle (launch/bundle.sh): libraries from the bundle, CUDA from the node.
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$here/usr"
. "$here/node-libs.sh"
exec "$here/bin/baton" "$@"
SH
cat > "$OUT/run" <<'SH'
#!/usr/bin/env bash
# run NAME ARGS...: a binary of this bundle (bin/NAME) with the bundle's libraries.
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/bin/${1:-}" ] || { echo "usage: $0 NAME ARGS... (NAME one of: $(ls "$here/bin" | tr '\n' ' '))" >&2; exit 2; }
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$here/usr"
. "$here/node-libs.sh"
exec "$here/bin/$1" "${@:2}"
SH
chmod +x "$OUT/baton" "$OUT/run"
echo "bundle: $OUT ($(du -sh "$OUT" | cut -f1), $(ls "$OUT/lib" | wc -l) libraries, $(ls "$plugin_dir" | wc -l) Open MPI plugins, needs glibc >= $(cat "$OUT/glibc-needed.txt"))"
echo "run: $OUT/baton --version"
