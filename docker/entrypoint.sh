#!/usr/bin/env bash
# Container entry point: `docker run hvdbench MODE ...` runs `bench MODE ...`.
set -euo pipefail
# Any --user works: give processes a writable HOME when the given user has none.
if [[ ! -w ${HOME:-/nonexistent} ]]; then
  export HOME=/tmp/hvdbench-home
  mkdir -p "$HOME"
fi
# Open MPI refuses root unless told; containers commonly run as root.
if [[ $(id -u) == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
exec bench "$@"
