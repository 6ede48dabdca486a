#!/usr/bin/env bash
# Entry point of a cluster container: `node.sh controller` or `node.sh compute`.
# The controller makes the munge key on the shared volume the first time; every container starts munged
# with it, then runs its Slurm daemon in the foreground (docker stop ends it, and with it the node).
set -euo pipefail
role=${1:?usage: node.sh controller|compute}
KEY=/etc/munge-shared/munge.key
log() { echo "node.sh($(hostname -s)): $*" >&2; }

if [[ $role == controller && ! -s $KEY ]]; then
  dd if=/dev/urandom of="$KEY.new" bs=1024 count=1 2>/dev/null && mv "$KEY.new" "$KEY"
fi
for _ in $(seq 60); do [[ -s $KEY ]] && break; sleep 1; done
[[ -s $KEY ]] || { log "error: no munge key at $KEY after 60 s"; exit 1; }
install -o munge -g munge -m 400 "$KEY" /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
runuser -u munge -- munged --force
mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm

case $role in
  controller) exec slurmctld -D -f /etc/slurm/slurm.conf ;;
  compute)    exec slurmd -D -f /etc/slurm/slurm.conf -N "$(hostname -s)" ;;
  *) log "error: role must be controller or compute (got '$role')"; exit 2 ;;
esac
