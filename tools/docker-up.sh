#!/usr/bin/env bash
# A Docker engine for make image and the image tests. An engine that answers (Docker CE or Debian's docker.io, run
# by root or a member of the docker group) is all make image needs: nothing is installed then, and a missing compose
# (v1's docker-compose or the plugin's `docker compose`) or debootstrap is a note (the cluster tests need a compose;
# debootstrap makes the base image only where no registry gives it). As root on Debian/Ubuntu, what is missing is
# installed (docker.io, docker-compose, debootstrap) and dockerd started when no engine answers. Idempotent.
set -euo pipefail
DOCKER=${HVDBENCH_DOCKER:-$(command -v docker || echo /usr/bin/docker)}

answers() { "$DOCKER" info >/dev/null 2>&1; }
has_compose() { command -v docker-compose >/dev/null || "$DOCKER" compose version >/dev/null 2>&1; }

engine=false
answers && engine=true
need=()
$engine || command -v dockerd >/dev/null || need+=(docker.io)
has_compose || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "docker-up: installing ${need[*]}" >&2
    "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" "${need[@]}"
  elif $engine; then
    echo "docker-up: note: not installed here: ${need[*]} (make image needs neither; the cluster tests need a" \
         "compose, and debootstrap makes the base image where no registry gives it)" >&2
  fi
fi
$engine && exit 0

if [[ $(id -u) != 0 ]]; then
  why=$("$DOCKER" info 2>&1 >/dev/null | grep -m1 -i 'error\|cannot\|denied' || true)
  echo "docker-up: error: no Docker engine answers${why:+ ($why)}: start it, or join the docker group" \
       "(sudo usermod -aG docker ${USER:-$(id -un)}, then log in again)" >&2
  exit 1
fi
command -v dockerd >/dev/null || { echo "docker-up: error: please install docker.io or Docker CE" >&2; exit 1; }
echo "docker-up: starting dockerd (log: /var/log/hvdbench-dockerd.log)" >&2
setsid dockerd >/var/log/hvdbench-dockerd.log 2>&1 < /dev/null &
for _ in $(seq 60); do
  answers && exit 0
  sleep 1
done
echo "docker-up: error: dockerd did not answer within 60 s; see /var/log/hvdbench-dockerd.log" >&2
exit 1
