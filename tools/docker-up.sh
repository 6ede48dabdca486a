#!/usr/bin/env bash
# A Docker engine for the image tests: install docker.io, docker-compose and debootstrap (Debian/Ubuntu,
# as root) when missing, and start dockerd when no engine answers. Idempotent.
set -euo pipefail
DOCKER=${HVDBENCH_DOCKER:-/usr/bin/docker}

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "docker-up: error: please install ${need[*]}" >&2
    exit 1
  fi
  echo "docker-up: installing ${need[*]}" >&2
  "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" "${need[@]}"
fi

if "$DOCKER" info >/dev/null 2>&1; then
  exit 0
fi
echo "docker-up: starting dockerd (log: /var/log/hvdbench-dockerd.log)" >&2
setsid dockerd >/var/log/hvdbench-dockerd.log 2>&1 < /dev/null &
for _ in $(seq 60); do
  "$DOCKER" info >/dev/null 2>&1 && exit 0
  sleep 1
done
echo "docker-up: error: dockerd did not answer within 60 s; see /var/log/hvdbench-dockerd.log" >&2
exit 1
