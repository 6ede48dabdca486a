#!/usr/bin/env bash
# A distribution registry here, for publishing tests and local mirrors: Debian's docker-registry (installed when
# missing, as root) serving HVDBENCH_REGISTRY_ADDR (default 127.0.0.1:5000) over plain HTTP, which Docker allows
# for loopback addresses. Its storage is kept under HVDBENCH_REGISTRY_DIR (default /var/cache/hvdbench/registry),
# so a push of layers it already holds is quick. Idempotent: exits at once when the registry answers. Prints the
# address. Stop it with: kill $(cat $HVDBENCH_REGISTRY_DIR/registry.pid)
set -euo pipefail
ADDR=${HVDBENCH_REGISTRY_ADDR:-127.0.0.1:5000}
DIR=${HVDBENCH_REGISTRY_DIR:-/var/cache/hvdbench/registry}
log() { echo "registry-up: $*" >&2; }

answers() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
  "http://$ADDR/v2/" 2>/dev/null; }
if answers; then echo "$ADDR"; exit 0; fi

if ! command -v docker-registry >/dev/null; then
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    log "error: please install docker-registry (Debian/Ubuntu) or another distribution registry"; exit 1
  fi
  log "installing docker-registry"
  # The package would start its own service (on :5000, with its own storage) where an init system runs: not here.
  own_policy=
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" docker-registry \
    || { [[ -z $own_policy ]] || rm -f /usr/sbin/policy-rc.d; exit 1; }
  [[ -z $own_policy ]] || rm -f /usr/sbin/policy-rc.d
fi

mkdir -p "$DIR/data"
cat > "$DIR/config.yml" <<CONF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $DIR/data
  delete:
    enabled: true
http:
  addr: $ADDR
CONF
log "starting docker-registry on $ADDR (storage $DIR/data, log $DIR/registry.log)"
setsid docker-registry serve "$DIR/config.yml" >>"$DIR/registry.log" 2>&1 < /dev/null &
echo $! > "$DIR/registry.pid"
for _ in $(seq 30); do
  if answers; then echo "$ADDR"; exit 0; fi
  kill -0 "$(cat "$DIR/registry.pid")" 2>/dev/null || break
  sleep 0.5
done
log "error: the registry did not answer on $ADDR; see $DIR/registry.log"; tail -n 3 "$DIR/registry.log" >&2
exit 1
