#!/usr/bin/env bash
# launch/bundle.sh makes a copy of baton that runs without the build's packages: with Open MPI's
# plugin, data and config directories hidden (a private mount namespace), the bundle still trains
# and checkpoints; every library it loads outside the bundle is glibc or CUDA (cudart, cuBLAS, NCCL, cuDNN:
# the node's, matching its driver, as launch/bundle.sh leaves them out).
source "$(dirname "$0")/lib.sh"

cp "$BATON" baton2  # an extra program (as the GPU test programs are bundled) runs through bundle/run
bash "$SRC/launch/bundle.sh" "$BATON" bundle ./baton2 > bundle.log
./bundle/baton --version | grep -q "^baton " || fail "bundle/baton --version"
./bundle/run baton2 --version | grep -q "^baton " || fail "bundle/run baton2 --version"
outside=$(LD_LIBRARY_PATH="$PWD/bundle/lib" ldd bundle/bin/baton | awk '/=> \// {print $1}' |
          grep -vE '^(libc|libm|libdl|libpthread|librt|libresolv)\.so|^lib(cudart|cublas|cublasLt|nccl|cudnn)\.so' || true)
for lib in $outside; do
  LD_LIBRARY_PATH="$PWD/bundle/lib" ldd bundle/bin/baton | grep "$lib" | grep -q "$PWD/bundle/lib" ||
    fail "bundle loads $lib from the system"
done

make_corpus train.txt 6
./bundle/baton data build --input train.txt --output tiny --train-tokenizer 300 > /dev/null
cat > tiny.toml <<'TOML'
[model]
n_layer = 1
n_head = 2
d_model = 16
seq_len = 16
[data]
train = "tiny"
tokenizer = "tiny.model"
[train]
steps = 2
global_batch = 2
micro_batch = 2
TOML
hide='mount -t tmpfs none /usr/lib/x86_64-linux-gnu/openmpi && mount -t tmpfs none /usr/share/openmpi'
if [ "$(id -u)" -eq 0 ] && unshare -m true 2>/dev/null && [ -d /usr/lib/x86_64-linux-gnu/openmpi ]; then
  unshare -m bash -c "$hide && ./bundle/baton train tiny.toml --set run.dir=run" > train.log 2>&1 ||
    { cat train.log; fail "bundle did not train with Open MPI hidden"; }
  grep -q "saved step-0000002.h5" train.log || { cat train.log; fail "no checkpoint"; }
else
  echo "skipped hiding Open MPI (needs root and unshare); training with the bundle as is"
  ./bundle/baton train tiny.toml --set run.dir=run > train.log
fi
echo "PASS"
