#!/usr/bin/env bash
# Here, before a GPU check (docs/gpu-check.md): put into DIR (default .gpu-check, ignored by git) what the GPU
# machine lacks for bench, as wheels for its Python (3.12, manylinux x86_64): pydantic and its needs, cffi (what
# Horovod's setup.py requires to build); and
# Horovod's sdist, which tools/gpu-check.sh builds there with this project's patch (docker/horovod/, in the
# tree). Nothing else: the GPU machine has PyTorch, typer, rich, PyYAML, nvidia-ml-py, psutil, cloudpickle,
# packaging, setuptools and wheel.
#
#   tools/gpu-check-prepare.sh [DIR] [PYTHON]      (make gpu-check-prepare)
set -euo pipefail
DIR=${1:-.gpu-check}
PY=${2:-python3}
TARGET_PYTHON=${HVDBENCH_GPU_PYTHON:-3.12}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HOROVOD_VERSION=$(sed -n 's/^HOROVOD_VERSION=//p' "$HERE/docker/stacks/current.env")
# pydantic at the version this machine's venv runs, and the versions it pins for its needs.
PYDANTIC=$("$PY" -c 'import importlib.metadata as m; print(m.version("pydantic"))')
# cffi and pycparser: Horovod's setup.py asks for cffi (setup_requires) and would fetch it from the index.
WANT=("pydantic==$PYDANTIC" pydantic-core annotated-types typing-inspection cffi pycparser)

mkdir -p "$DIR/wheels"
rm -f "$DIR"/wheels/*.whl
# One resolution for the target Python: pip picks pydantic-core at the exact version pydantic requires.
"$PY" -m pip download -q --only-binary=:all: --implementation cp --python-version "$TARGET_PYTHON" \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --dest "$DIR/wheels" "${WANT[@]}"
# typing-extensions comes along as pydantic's need; the GPU machine has its own (one copy is enough).
rm -f "$DIR"/wheels/typing_extensions-*.whl
if [ ! -f "$DIR/horovod-$HOROVOD_VERSION.tar.gz" ]; then
  "$PY" -m pip download -q --no-deps --no-binary :all: --dest "$DIR" "horovod==$HOROVOD_VERSION"
fi
du -sh "$DIR" | awk '{print "gpu-check-prepare: " $1 " in '"$DIR"' (the device tool carries 64 MiB at most)"}'
ls "$DIR" "$DIR/wheels"
