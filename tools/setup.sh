#!/usr/bin/env bash
# Everything `make venv` needs on a fresh Debian/Ubuntu machine: system packages (as root), the venv
# with pinned frameworks, tf-keras, this package, and Horovod built by docker/build-horovod.sh.
#   tools/setup.sh VENV_DIR PYTHON
set -euo pipefail
VENV=${1:-.venv}
PYTHON=${2:-python3}
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need_apt=()
command -v mpicxx >/dev/null || need_apt+=(libopenmpi-dev openmpi-bin)
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
command -v patch >/dev/null || need_apt+=(patch)
# A stock Debian or Ubuntu python3 has neither: venv's ensurepip (python3-venv), and Python.h, which Horovod's
# extensions and torch.compile's kernels build against (python3-dev).
"$PYTHON" -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
"$PYTHON" -c 'import pathlib, sys, sysconfig; sys.exit(not (pathlib.Path(sysconfig.get_paths()["include"]) / "Python.h").is_file())' \
  || need_apt+=(python3-dev)
if ((${#need_apt[@]})); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need_apt[*]}" >&2
    tools/apt-install.sh "${need_apt[@]}"
  else
    echo "setup: error: please install ${need_apt[*]} (OpenMPI, cmake, a C++ compiler, patch, Python's venv and headers)" >&2
    exit 1
  fi
fi

[[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
PY=$VENV/bin/python
"$PY" -m pip install -q --upgrade pip setuptools wheel
# The installs go through uv with pip's configuration (tools/uv_install.py: about 45 s less from a warm cache),
# or through pip where uv is not to be had or pip's configuration holds a setting uv would not honour.
"$PY" -m pip install -q uv || echo "setup: uv did not install; pip installs everything" >&2
install() {
  local rc=0
  "$PY" -m tools.uv_install "$PY" "$@" || rc=$?
  if [[ $rc == 3 ]]; then "$PY" -m pip install "$@"; else return $rc; fi
}
# Bytecode is compiled at install (pip's default, uv's --compile-bytecode): where PYTHONDONTWRITEBYTECODE is set
# (as on this project's machines), nothing writes it later, and every process would compile torch and TensorFlow
# again (measured: a fresh clone's multiproc tier took 21m56s without it, 14m12s with it).
install -q -r requirements/venv.txt
# tf-keras without its dependencies: it would otherwise pull the non-CPU tensorflow wheel.
# (TensorFlow's start-up logging, written to stderr whatever TF_CPP_MIN_LOG_LEVEL says, is dropped here.)
tf_version=$("$PY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null) \
  || { echo "setup: error: TensorFlow does not import in $VENV" >&2; exit 1; }
install -q --no-deps "tf-keras==$tf_version"
# TorchRec for torch-hybrid: its dependencies, then itself without them (requirements/hybrid.txt says why).
install -q -r requirements/hybrid.txt
install -q --no-deps torchrec==1.8.0
install -q --no-deps -e .
MAKEFLAGS=${MAKEFLAGS:--j$(nproc)} docker/build-horovod.sh "$PY"
check_log=$(mktemp)
"$VENV/bin/horovodrun" --check-build 2>"$check_log" | sed -n '/Available Frameworks/,$p' \
  || { cat "$check_log" >&2; rm -f "$check_log"; exit 1; }
rm -f "$check_log"
