#!/usr/bin/env bash
# Make `apptainer` (and `singularity`) runnable on a Debian 12 host, as root, and print the directory to
# put on PATH:
#   export PATH=$(tools/apptainer-up.sh):$PATH        (or: make apptainer-up)
# A real installation on PATH is used as it is. Otherwise Apptainer comes from Debian sid (bookworm has no
# package, and sid's needs glibc >= 2.38): a minimal sid root filesystem under HVDBENCH_APPTAINER_DIR
# (default /var/cache/hvdbench/apptainer, kept between runs) holds it, and the wrappers in DIR/bin enter
# that filesystem with a private mount namespace and pivot_root (apptainer refuses a chroot) and run it
# there. Host directories appear at their own paths inside: the wrapper binds the usual data and work
# directories, the current directory, the host paths named in the arguments and in APPTAINER_BIND (and its
# aliases), and what HVDBENCH_APPTAINER_BINDS lists (space separated). A path outside the usual directories
# needs a mount point in DIR/sid, which only root can make: root's first call that shows it makes it.
# Non-root users run the same wrappers; they enter through a user namespace, and apptainer then runs
# without privileges (results they write are theirs).
set -euo pipefail
log() { echo "apptainer-up: $*" >&2; }

for name in apptainer singularity; do
  found=$(command -v "$name" || true)
  if [[ -n $found ]] && ! grep -qs "hvdbench-apptainer-wrapper" "$found" && "$found" version >/dev/null 2>&1; then
    dirname "$found"
    exit 0
  fi
done

DIR=${HVDBENCH_APPTAINER_DIR:-/var/cache/hvdbench/apptainer}
ROOT=$DIR/sid
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The host directories every wrapper call shows inside at their own paths (data, work, the SIF cache, CAs).
DATA_DIRS="/tmp /var/tmp /home /root /work /opt /srv /mnt /var/cache/hvdbench /etc/ssl/certs"
# A user who is not root takes the wrappers root set up (they enter through a user namespace, below).
if [[ $(id -u) != 0 ]]; then
  if [[ -x $DIR/bin/apptainer ]] && grep -qs "hvdbench-apptainer-wrapper" "$DIR/bin/apptainer"; then
    echo "$DIR/bin"
    exit 0
  fi
  log "error: run as root once to set up $DIR (or install apptainer)"
  exit 1
fi
mkdir -p "$DIR/bin"
chmod 755 "$DIR" "$DIR/bin"
# One set-up at a time: make test's set-up calls this from two steps that run side by side (the CUDA SIF's and the
# other images'); the second waits for the first and then finds the work done.
exec 9>"$DIR/.up.lock"
flock 9

if ! command -v debootstrap >/dev/null; then
  log "installing debootstrap"
  "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" debootstrap
fi
if [[ ! -x $ROOT/usr/bin/apptainer ]]; then
  log "bootstrapping a Debian sid root filesystem with apptainer into $ROOT (a few minutes, once)"
  rm -rf "$ROOT"
  # debootstrap ignores the Release file's Valid-Until; the mirror's sid may be stale, apt would refuse it.
  debootstrap --variant=minbase --include=apptainer,squashfs-tools sid "$ROOT" "$MIRROR" >"$DIR/debootstrap.log" 2>&1 \
    || { log "error: debootstrap failed, see $DIR/debootstrap.log"; exit 1; }
fi
echo 'Acquire::Check-Valid-Until "false";' > "$ROOT/etc/apt/apt.conf.d/99no-valid-until"
# apptainer build reads /etc/hosts, which minbase lacks (the wrapper binds the host's over it, with
# resolv.conf, passwd and group: host names resolve, and users are who they are on the host).
[[ -s $ROOT/etc/hosts ]] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$ROOT/etc/hosts"
# --fakeroot builds (definition files with %post) as root need a subordinate id range.
grep -q '^root:' "$ROOT/etc/subuid" 2>/dev/null || echo 'root:100000:65536' >> "$ROOT/etc/subuid"
grep -q '^root:' "$ROOT/etc/subgid" 2>/dev/null || echo 'root:100000:65536' >> "$ROOT/etc/subgid"

# Root containers ask for every capability by default; a container host's bounding set often lacks
# some (CAP_SYS_RESOURCE here), and the starter then aborts. Give root exactly what the bounding set has.
# Capabilities 38 and up (PERFMON, BPF, CHECKPOINT_RESTORE) are left out: no benchmark needs them, and the
# container cluster's nodes (docker/cluster/apptainer.yaml) run this set-up under a Docker that cannot grant them.
bnd=$(( 0x$(awk '/^CapBnd:/ {print $2}' /proc/self/status) & ((1 << 38) - 1) ))
names=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE
  NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT
  SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE
  AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ
  PERFMON BPF CHECKPOINT_RESTORE)
caps=()
for i in "${!names[@]}"; do
  if (( (bnd >> i) & 1 )); then caps+=("\"CAP_${names[$i]}\""); fi
done
(IFS=,; printf '{"users":{"root":[%s]},"groups":{}}\n' "${caps[*]}") > "$ROOT/etc/apptainer/.capability.json"
mv -f "$ROOT/etc/apptainer/.capability.json" "$ROOT/etc/apptainer/capability.json"
sed -i 's/^root default capabilities = .*/root default capabilities = file/' "$ROOT/etc/apptainer/apptainer.conf"
# Tasks that start the same SIF together share its loop device instead of each attaching one. Measured in
# the container cluster (whose nodes share one kernel): `srun -N2 -n6 apptainer exec` failed 7 times in 14
# with "could not open /dev/loopN" while each task attached its own; sharing, 0 in 16 (6 and 8 tasks).
sed -i 's/^shared loop devices = .*/shared loop devices = yes/' "$ROOT/etc/apptainer/apptainer.conf"

# The wrapper: enter $ROOT (root: a mount namespace; others: a user namespace that keeps their uid) and
# run apptainer there. The mounts vanish with the command. Replaced atomically: a job may be starting one.
# The wrapper names the system tools it runs by their paths: a user's PATH often lacks /usr/sbin (pivot_root).
tool() { command -v "$1" || { log "error: $1 not found (util-linux)"; exit 1; }; }
UNSHARE=$(tool unshare)
MOUNT=$(tool mount)
UMOUNT=$(tool umount)
PIVOT_ROOT=$(tool pivot_root)
SETPRIV=$(tool setpriv)
cat > "$DIR/bin/.apptainer.new" <<EOS
#!/bin/sh
# hvdbench-apptainer-wrapper (tools/apptainer-up.sh): apptainer from $ROOT, host paths bound.
binds="/etc/hosts /etc/resolv.conf /etc/passwd /etc/group $DATA_DIRS /run/docker.sock"
binds="\$binds \${HVDBENCH_APPTAINER_BINDS:-} \$PWD"
# Host paths named in the arguments or the bind variables (an image, a --bind or APPTAINER_BIND source,
# docker-archive://FILE) are shown too: a directory as itself, a file through its directory. The system's
# own directories never are (below).
for arg in "\$@" "\${APPTAINER_BIND:-}" "\${APPTAINER_BINDPATH:-}" "\${SINGULARITY_BIND:-}" "\${SINGULARITY_BINDPATH:-}"; do
  for p in \$(printf '%s\\n' "\$arg" | tr ':,' '  '); do
    case \$p in /*) ;; *) p=\$PWD/\$p ;; esac
    [ -e "\$p" ] || continue
    [ -d "\$p" ] || p=\$(dirname "\$p")
    p=\$(realpath "\$p")
    binds="\$binds \$p"
  done
done
if [ "\$(id -u)" = 0 ]; then enter="$UNSHARE --mount --propagation private"
else enter="$UNSHARE --map-current-user --keep-caps --mount --propagation private"; fi
exec \$enter /bin/sh -ec '
root=\$1; binds=\$2; shift 2
$MOUNT --bind "\$root" "\$root"
$MOUNT --rbind /proc "\$root/proc"
$MOUNT --rbind /sys "\$root/sys"
$MOUNT --rbind /dev "\$root/dev"
for d in \$binds; do
  case \$d in /|/usr|/usr/*|/etc|/bin|/bin/*|/sbin|/sbin/*|/lib*|/proc*|/sys*|/dev|/var|/var/lib|/var/lib/*|/run|/boot*) continue ;; esac
  if [ -d "\$d" ]; then mkdir -p "\$root\$d" 2>/dev/null || continue
  elif [ -e "\$d" ]; then
    [ -e "\$root\$d" ] || { mkdir -p "\$root\${d%/*}" && touch "\$root\$d"; } 2>/dev/null || continue
  else continue; fi
  $MOUNT --rbind "\$d" "\$root\$d"
done
cwd=\$PWD
cd "\$root"; mkdir -p .oldroot
$PIVOT_ROOT . .oldroot
cd /
$UMOUNT -l /.oldroot
cd "\$cwd" 2>/dev/null || cd /
if [ "\$(id -u)" = 0 ]; then exec /usr/bin/apptainer "\$@"; fi
exec $SETPRIV --inh-caps=-all --ambient-caps=-all --bounding-set=-all /usr/bin/apptainer "\$@"' sh "$ROOT" "\$binds" "\$@"
EOS
chmod 755 "$DIR/bin/.apptainer.new"
mv -f "$DIR/bin/.apptainer.new" "$DIR/bin/apptainer"
# Mount points for the wrapper's binds and pivot_root, made now: a non-root user cannot make them later.
for d in /.oldroot $DATA_DIRS; do mkdir -p "$ROOT$d"; done
ln -sf apptainer "$DIR/bin/singularity"
"$DIR/bin/apptainer" version >&2
echo "$DIR/bin"
