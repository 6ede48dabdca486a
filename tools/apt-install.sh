#!/usr/bin/env bash
# Install Debian packages, as root: `apt-get update` and `apt-get install` under one lock of this project's.
#
#   tools/apt-install.sh PACKAGE...
#
# The set-up scripts (setup.sh for the venv; docker-up, slurm-up, registry-up and apptainer-up for the system
# tiers) may run at the same time: `make test` starts the system tiers' services beside the venv's set-up. apt's
# own lock makes a second `apt-get update` fail at once rather than wait, so each install here waits its turn.
set -euo pipefail
(($#)) || { echo "usage: apt-install.sh PACKAGE..." >&2; exit 2; }
LOCK=${HVDBENCH_APT_LOCK:-/var/lock/hvdbench-apt.lock}
exec 9>"$LOCK"
flock -w 1800 9 || { echo "apt-install: error: $LOCK held for 30 minutes by another install" >&2; exit 1; }
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
