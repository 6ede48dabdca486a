#!/usr/bin/env bash
# Build Horovod from its PyPI sdist, with hvdbench's patches, into a cached wheel, and install it.
#
# One script for the local venv (make venv) and the Dockerfiles, so both build the same thing.
#
#   docker/build-horovod.sh PYTHON
#
# PYTHON is the interpreter of the environment to install into; the frameworks (torch and/or
# tensorflow) must already be installed there: Horovod builds against what it finds.
#
# Environment (all optional):
#   HOROVOD_VERSION        sdist version to build                  (default 0.28.1)
#   HOROVOD_PATCH          auto|yes|no: apply docker/horovod/$HOROVOD_VERSION.patch
#                          (auto: when that file exists)          (default auto)
#   HOROVOD_GPU            auto|nccl|none: NCCL GPU operations     (default auto: nccl when nvcc is
#                          on PATH and torch was built with CUDA)
#   HVDBENCH_WHEEL_CACHE   where built wheels are kept             (default ~/.cache/hvdbench/wheels)
#   HVDBENCH_WHEEL_SEED    a read-only folder of such cache entries, looked at when the cache has
#                          no wheel for the key (the image build gets the venv's wheels this way)
#   HVDBENCH_SDIST_DIR     a folder already holding the sdist (offline builds, the GPU machine)
#   MAKEFLAGS              parallel compile jobs                   (default -j<nproc>)
#
# The cache key covers everything the binary depends on: Horovod version, patch contents, Python
# ABI, framework versions, MPI presence and GPU flags. A second run with the same key only installs.
set -euo pipefail

PY=${1:?usage: build-horovod.sh PYTHON}
HOROVOD_VERSION=${HOROVOD_VERSION:-0.28.1}
HOROVOD_PATCH=${HOROVOD_PATCH:-auto}
HOROVOD_GPU=${HOROVOD_GPU:-auto}
CACHE=${HVDBENCH_WHEEL_CACHE:-$HOME/.cache/hvdbench/wheels}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PATCH_FILE="$HERE/horovod/$HOROVOD_VERSION.patch"

log() { echo "build-horovod: $*" >&2; }
die() { log "error: $*"; exit 1; }

"$PY" -c 'import sys' 2>/dev/null || die "python '$PY' does not run"

# What is in the target environment decides which Horovod extensions are built.
read -r HAS_TORCH TORCH_VER TORCH_CUDA HAS_TF TF_VER PYTAG < <("$PY" - <<'EOF'
import importlib.metadata as md, sys
def ver(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return ""
torch = ver("torch")
tf = ver("tensorflow") or ver("tensorflow-cpu")
cuda = "0"
if torch:
    import torch as t
    cuda = "1" if t.version.cuda else "0"
print(int(bool(torch)), torch or "-", cuda, int(bool(tf)), tf or "-",
      f"cp{sys.version_info.major}{sys.version_info.minor}")
EOF
)
[[ $HAS_TORCH == 1 || $HAS_TF == 1 ]] || die "neither torch nor tensorflow is installed for $PY"

case $HOROVOD_PATCH in
  auto) if [[ -f $PATCH_FILE ]]; then HOROVOD_PATCH=yes; else HOROVOD_PATCH=no; fi ;;
  yes) [[ -f $PATCH_FILE ]] || die "HOROVOD_PATCH=yes but $PATCH_FILE does not exist" ;;
  no) ;;
  *) die "HOROVOD_PATCH must be auto, yes or no (got '$HOROVOD_PATCH')" ;;
esac

case $HOROVOD_GPU in
  auto) if [[ $TORCH_CUDA == 1 ]] && command -v nvcc >/dev/null; then HOROVOD_GPU=nccl; else HOROVOD_GPU=none; fi ;;
  nccl|none) ;;
  *) die "HOROVOD_GPU must be auto, nccl or none (got '$HOROVOD_GPU')" ;;
esac

HAS_MPI=0
command -v mpicxx >/dev/null && HAS_MPI=1

patch_sum=none
[[ $HOROVOD_PATCH == yes ]] && patch_sum=$(sha256sum "$PATCH_FILE" | cut -c1-12)
KEY="horovod-$HOROVOD_VERSION-$PYTAG-torch$TORCH_VER-tf$TF_VER-mpi$HAS_MPI-gpu$HOROVOD_GPU-patch$patch_sum"
KEY=${KEY//+/_}
WHEEL_DIR="$CACHE/$KEY"

install_wheel() {
  # --no-deps: Horovod's requirements (cloudpickle, psutil, pyyaml, packaging) are installed
  # explicitly below so that pip never touches the frameworks.
  "$PY" -m pip install -q cloudpickle psutil pyyaml packaging
  "$PY" -m pip install -q --no-deps --force-reinstall "$WHEEL_DIR"/horovod-*.whl
  log "installed $(basename "$WHEEL_DIR"/horovod-*.whl) from $WHEEL_DIR"
}

if ! compgen -G "$WHEEL_DIR/horovod-*.whl" >/dev/null && [[ -n ${HVDBENCH_WHEEL_SEED:-} ]] \
    && compgen -G "$HVDBENCH_WHEEL_SEED/$KEY/horovod-*.whl" >/dev/null; then
  log "seeding the cache from $HVDBENCH_WHEEL_SEED/$KEY"
  mkdir -p "$WHEEL_DIR"
  cp "$HVDBENCH_WHEEL_SEED/$KEY"/horovod-*.whl "$WHEEL_DIR/"
fi
if compgen -G "$WHEEL_DIR/horovod-*.whl" >/dev/null; then
  log "cached wheel found for $KEY"
  install_wheel
  exit 0
fi

log "building $KEY (torch=$TORCH_VER tf=$TF_VER mpi=$HAS_MPI gpu=$HOROVOD_GPU patch=$HOROVOD_PATCH)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if [[ -n ${HVDBENCH_SDIST_DIR:-} && -f $HVDBENCH_SDIST_DIR/horovod-$HOROVOD_VERSION.tar.gz ]]; then
  cp "$HVDBENCH_SDIST_DIR/horovod-$HOROVOD_VERSION.tar.gz" "$WORK/"
else
  "$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$WORK"
fi
tar -xzf "$WORK/horovod-$HOROVOD_VERSION.tar.gz" -C "$WORK"
SRC="$WORK/horovod-$HOROVOD_VERSION"
if [[ $HOROVOD_PATCH == yes ]]; then
  patch -d "$SRC" -p1 --forward --quiet < "$PATCH_FILE" || die "patch $PATCH_FILE does not apply"
fi

# Build requirements Horovod's setup.py imports, installed into the target environment.
"$PY" -m pip install -q setuptools wheel packaging

export HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MXNET=1
export CMAKE_POLICY_VERSION_MINIMUM=3.5     # cmake >= 4 refuses Horovod's old cmake_minimum_required
export MAKEFLAGS=${MAKEFLAGS:--j$(nproc)}
if [[ $HAS_TORCH == 1 ]]; then export HOROVOD_WITH_PYTORCH=1; else export HOROVOD_WITHOUT_PYTORCH=1; fi
if [[ $HAS_TF == 1 ]]; then export HOROVOD_WITH_TENSORFLOW=1; else export HOROVOD_WITHOUT_TENSORFLOW=1; fi
if [[ $HAS_MPI == 1 ]]; then export HOROVOD_WITH_MPI=1; else export HOROVOD_WITHOUT_MPI=1; fi
if [[ $HOROVOD_GPU == nccl ]]; then
  export HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_LINK=SHARED
  # Build against the NCCL that PyTorch loads (the nvidia-nccl wheel) when it is there, so the
  # process never holds two NCCL versions; otherwise against the system NCCL (HOROVOD_NCCL_HOME).
  NCCL_DIR=$("$PY" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  if [[ -n $NCCL_DIR && -d $NCCL_DIR/include ]]; then
    export HOROVOD_NCCL_INCLUDE=$NCCL_DIR/include HOROVOD_NCCL_LIB=$NCCL_DIR/lib
    [[ -e $NCCL_DIR/lib/libnccl.so ]] || ln -sf "$(ls "$NCCL_DIR"/lib/libnccl.so.* | head -n1)" "$NCCL_DIR/lib/libnccl.so"
    log "NCCL from $NCCL_DIR"
  fi
fi

mkdir -p "$WHEEL_DIR.tmp"
"$PY" -m pip wheel --no-deps --no-build-isolation -w "$WHEEL_DIR.tmp" "$SRC" >"$WORK/build.log" 2>&1 || {
  tail -n 60 "$WORK/build.log" >&2
  rm -rf "$WHEEL_DIR.tmp"
  die "Horovod build failed (last lines above)"
}
rm -rf "$WHEEL_DIR" && mv "$WHEEL_DIR.tmp" "$WHEEL_DIR"
log "wheel cached in $WHEEL_DIR"
install_wheel
