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
#                          found and torch or tensorflow is a CUDA build)
#   HOROVOD_CUDA_HOME      the CUDA toolkit whose bin/nvcc compiles Horovod's kernels (default: nvcc on PATH)
#   HOROVOD_BUILD_CUDA_CC_LIST  compute capabilities to build kernels for, e.g. 80,90 (default: those of the
#                          GPUs nvidia-smi lists; with none, as in an image build, every one nvcc knows, which
#                          costs minutes)
#   HVDBENCH_WHEEL_CACHE   where built wheels are kept             (default ~/.cache/hvdbench/wheels)
#   HVDBENCH_WHEEL_SEED    a read-only folder of such cache entries, looked at when the cache has
#                          no wheel for the key (the image build gets the venv's wheels this way)
#   HVDBENCH_SDIST_DIR     a folder already holding the sdist (offline builds, the GPU machine)
#   MAKEFLAGS              parallel compile jobs                   (default -j<nproc>, also added to
#                          make's own flags when make runs this without -j)
#
# The cache key covers everything the binary depends on: Horovod version, patch contents (the GCC 13 one where
# it applies), Python ABI, framework versions, MPI presence and GPU flags. A second run with the same key only installs.
set -euo pipefail

PY=${1:?usage: build-horovod.sh PYTHON}
HOROVOD_VERSION=${HOROVOD_VERSION:-0.28.1}
HOROVOD_PATCH=${HOROVOD_PATCH:-auto}
# Read, then dropped from the environment: Horovod's own setup reads HOROVOD_GPU as CUDA or ROCM.
GPU_OPS=${HOROVOD_GPU:-auto}
unset HOROVOD_GPU
CACHE=${HVDBENCH_WHEEL_CACHE:-$HOME/.cache/hvdbench/wheels}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PATCH_FILE="$HERE/horovod/$HOROVOD_VERSION.patch"
GPU_PATCH_FILE="$HERE/horovod/$HOROVOD_VERSION-gpu.patch"   # also applied to GPU builds (HOROVOD_GPU=nccl)
GCC13_PATCH_FILE="$HERE/horovod/$HOROVOD_VERSION-gcc13.patch"   # also applied where libstdc++ is 13 or newer

log() { echo "build-horovod: $*" >&2; }
die() { log "error: $*"; exit 1; }

"$PY" -c 'import sys' 2>/dev/null || die "python '$PY' does not run"

# What is in the target environment decides which Horovod extensions are built.
read -r HAS_TORCH TORCH_VER FRAMEWORK_CUDA HAS_TF TF_VER PYTAG < <("$PY" - <<'EOF'
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
elif tf:
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as t
    cuda = "1" if t.sysconfig.get_build_info().get("is_cuda_build") else "0"
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

NVCC=nvcc
[[ -n ${HOROVOD_CUDA_HOME:-} ]] && NVCC=$HOROVOD_CUDA_HOME/bin/nvcc
case $GPU_OPS in
  auto) if [[ $FRAMEWORK_CUDA == 1 ]] && command -v "$NVCC" >/dev/null; then GPU_OPS=nccl; else GPU_OPS=none; fi ;;
  nccl|none) ;;
  *) die "HOROVOD_GPU must be auto, nccl or none (got '$GPU_OPS')" ;;
esac

HAS_MPI=0
command -v mpicxx >/dev/null && HAS_MPI=1

patch_sum=none
[[ $HOROVOD_PATCH == yes ]] && patch_sum=$(sha256sum "$PATCH_FILE" | cut -c1-12)
# Horovod 0.28.1 leans on headers that libstdc++ before 13 included for it: with libstdc++ 13 or newer (the GPU
# machine's g++ 13.3) it does not compile without $HOROVOD_VERSION-gcc13.patch (two #include lines). Applied,
# whatever HOROVOD_PATCH says, where the C++ compiler's libstdc++ is 13 or newer, and then part of the key.
LIBSTDCXX=$(echo '#include <cstddef>' | "${CXX:-c++}" -x c++ -dM -E - 2>/dev/null | sed -n 's/^#define _GLIBCXX_RELEASE //p')
if [[ ${LIBSTDCXX:-0} -ge 13 && -f $GCC13_PATCH_FILE ]]; then
  patch_sum="$patch_sum-gcc13$(sha256sum "$GCC13_PATCH_FILE" | cut -c1-12)"
else
  GCC13_PATCH_FILE=
fi
# On a machine with GPUs, kernels for those GPUs only (an H100 or H200: 90): a wheel for this machine's venv,
# built in a fraction of the time every architecture takes. An image has no GPU at build time: all of them.
if [[ $GPU_OPS == nccl && -z ${HOROVOD_BUILD_CUDA_CC_LIST:-} ]] && command -v nvidia-smi >/dev/null; then
  present=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d '. ' | sort -un | paste -sd, -) \
    || present=
  if [[ $present =~ ^[0-9]+(,[0-9]+)*$ ]]; then
    export HOROVOD_BUILD_CUDA_CC_LIST=$present
    log "the GPUs here have compute capability $present: kernels for those only (HOROVOD_BUILD_CUDA_CC_LIST)"
  fi
fi
GPU_KEY=$GPU_OPS
if [[ $GPU_OPS == nccl ]]; then
  command -v "$NVCC" >/dev/null || die "HOROVOD_GPU=nccl but no nvcc ($NVCC)"
  # The NCCL the framework loads: the nvidia-nccl wheel of the target environment (a namespace package,
  # so its __path__, not __file__), else the system's. The wheel's directory is baked into the binary's
  # RUNPATH, so it is part of the key, as are nvcc's release and the architectures.
  NCCL_DIR=$("$PY" -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  [[ -n $NCCL_DIR && -d $NCCL_DIR/include ]] || NCCL_DIR=
  NVCC_RELEASE=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  GPU_KEY="nccl-cuda$NVCC_RELEASE-cc${HOROVOD_BUILD_CUDA_CC_LIST:-all}-$(echo "${NCCL_DIR:-system}" | sha256sum | cut -c1-8)"
  if [[ $HOROVOD_PATCH == yes && -f $GPU_PATCH_FILE ]]; then
    GPU_KEY="$GPU_KEY-gpupatch$(sha256sum "$GPU_PATCH_FILE" | cut -c1-12)"
  else
    GPU_PATCH_FILE=
  fi
  GPU_KEY=${GPU_KEY//,/_}
fi
KEY="horovod-$HOROVOD_VERSION-$PYTAG-torch$TORCH_VER-tf$TF_VER-mpi$HAS_MPI-gpu$GPU_KEY-patch$patch_sum"
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

log "building $KEY (torch=$TORCH_VER tf=$TF_VER mpi=$HAS_MPI gpu=$GPU_OPS patch=$HOROVOD_PATCH)"
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
if [[ $GPU_OPS == nccl && -n ${GPU_PATCH_FILE:-} ]]; then
  patch -d "$SRC" -p1 --forward --quiet < "$GPU_PATCH_FILE" || die "patch $GPU_PATCH_FILE does not apply"
fi
if [[ -n $GCC13_PATCH_FILE ]]; then
  patch -d "$SRC" -p1 --forward --quiet < "$GCC13_PATCH_FILE" || die "patch $GCC13_PATCH_FILE does not apply"
fi

# Build requirements Horovod's setup.py imports, installed into the target environment.
"$PY" -m pip install -q setuptools wheel packaging

export HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MXNET=1
export CMAKE_POLICY_VERSION_MINIMUM=3.5     # cmake >= 4 refuses Horovod's old cmake_minimum_required
# Under make (make venv), MAKEFLAGS holds make's own flags (--no-print-directory): -j<nproc> unless a -j is there.
[[ ${MAKEFLAGS:-} =~ (^|[[:space:]])-j ]] || MAKEFLAGS="${MAKEFLAGS:-} -j$(nproc)"
export MAKEFLAGS
if [[ $HAS_TORCH == 1 ]]; then export HOROVOD_WITH_PYTORCH=1; else export HOROVOD_WITHOUT_PYTORCH=1; fi
if [[ $HAS_TF == 1 ]]; then export HOROVOD_WITH_TENSORFLOW=1; else export HOROVOD_WITHOUT_TENSORFLOW=1; fi
if [[ $HAS_MPI == 1 ]]; then export HOROVOD_WITH_MPI=1; else export HOROVOD_WITHOUT_MPI=1; fi
if [[ $GPU_OPS == nccl ]]; then
  export HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_LINK=SHARED
  # Build against the NCCL the framework loads (the nvidia-nccl wheel) when it is there, so the
  # process never holds two NCCL versions; otherwise against the system NCCL (HOROVOD_NCCL_HOME).
  if [[ -n $NCCL_DIR ]]; then
    export HOROVOD_NCCL_INCLUDE=$NCCL_DIR/include HOROVOD_NCCL_LIB=$NCCL_DIR/lib
    [[ -e $NCCL_DIR/lib/libnccl.so ]] || ln -sf "$(ls "$NCCL_DIR"/lib/libnccl.so.* | head -n1)" "$NCCL_DIR/lib/libnccl.so"
    log "NCCL from $NCCL_DIR"
  fi
  if [[ -n ${HOROVOD_CUDA_HOME:-} ]]; then
    # Horovod's FindPytorch asks torch.utils.cpp_extension for CUDA_HOME (env, else nvcc on PATH).
    export CUDA_HOME=$HOROVOD_CUDA_HOME PATH=$HOROVOD_CUDA_HOME/bin:$PATH
  fi
  log "CUDA kernels by $NVCC (release $NVCC_RELEASE) for compute capabilities ${HOROVOD_BUILD_CUDA_CC_LIST:-all}"
fi

mkdir -p "$WHEEL_DIR.tmp"
"$PY" -m pip wheel --no-deps --no-build-isolation -w "$WHEEL_DIR.tmp" "$SRC" >"$WORK/build.log" 2>&1 || {
  grep -A 12 "CMake Error" "$WORK/build.log" | head -n 80 >&2 || true   # a configure failure's reason
  tail -n 60 "$WORK/build.log" >&2
  rm -rf "$WHEEL_DIR.tmp"
  die "Horovod build failed (last lines above)"
}
rm -rf "$WHEEL_DIR" && mv "$WHEEL_DIR.tmp" "$WHEEL_DIR"
log "wheel cached in $WHEEL_DIR"
install_wheel
