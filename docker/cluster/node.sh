#!/usr/bin/env bash
# Entry point of a cluster container: `node.sh controller` or `node.sh compute`.
# The controller makes the cluster's keys on the shared volume the first time (munge key, root's SSH key
# for mpirun/horovodrun -H); every container installs them, starts munged and sshd, then runs its Slurm
# daemon in the foreground (docker stop or kill ends it, and with it the node).
set -euo pipefail
role=${1:?usage: node.sh controller|compute}
KEYS=/etc/cluster-keys
log() { echo "node.sh($(hostname -s)): $*" >&2; }

if [[ $role == controller && ! -s $KEYS/ready ]]; then
  dd if=/dev/urandom of="$KEYS/munge.key" bs=1024 count=1 2>/dev/null
  rm -f "$KEYS/id_ed25519" "$KEYS/id_ed25519.pub"
  ssh-keygen -q -t ed25519 -N "" -C hvdbench-cluster -f "$KEYS/id_ed25519"
  echo ok > "$KEYS/ready"
fi
for _ in $(seq 60); do [[ -s $KEYS/ready ]] && break; sleep 1; done
[[ -s $KEYS/ready ]] || { log "error: no cluster keys in $KEYS after 60 s"; exit 1; }

install -o munge -g munge -m 400 "$KEYS/munge.key" /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
runuser -u munge -- munged --force

# SSH between the nodes as root, with the image's PATH (bench, horovodrun) for commands run over it.
install -d -m 700 /root/.ssh
install -m 600 "$KEYS/id_ed25519" /root/.ssh/id_ed25519
install -m 644 "$KEYS/id_ed25519.pub" /root/.ssh/authorized_keys
printf 'Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n' > /root/.ssh/config
printf 'PATH=%s\nOMPI_ALLOW_RUN_AS_ROOT=1\nOMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n' "$PATH" > /root/.ssh/environment
mkdir -p /run/sshd && ssh-keygen -A >/dev/null
/usr/sbin/sshd -o PermitUserEnvironment=yes -o PermitRootLogin=prohibit-password

mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
case $role in
  controller) exec slurmctld -D -f /etc/slurm/slurm.conf ;;
  compute)    exec slurmd -D -f /etc/slurm/slurm.conf -N "$(hostname -s)" ;;
  *) log "error: role must be controller or compute (got '$role')"; exit 2 ;;
esac
