#!/usr/bin/env bash
# A real one-node Slurm cluster for the tests: munge, slurmctld and slurmd on this host, with a
# project-local configuration. Idempotent; prints the SLURM_CONF to use:
#   export SLURM_CONF=$(tools/slurm-up.sh)
# HVDBENCH_SLURM_DIR (default /tmp/hvdbench-slurm) holds slurm.conf, state, spool and logs.
# CPUs are declared as HVDBENCH_SLURM_CPUS (default 8) whatever the host has (config_overrides), so
# tests can start more tasks than cores; they oversubscribe, which is fine for correctness tests.
set -euo pipefail
DIR=${HVDBENCH_SLURM_DIR:-/tmp/hvdbench-slurm}
CPUS=${HVDBENCH_SLURM_CPUS:-8}
CONF=$DIR/slurm.conf
log() { echo "slurm-up: $*" >&2; }

need=()
command -v slurmctld >/dev/null || need+=(slurm-wlm)
command -v munged >/dev/null || need+=(munge)
if ((${#need[@]})); then
  [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null || { log "error: please install ${need[*]}"; exit 1; }
  log "installing ${need[*]}"
  "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" "${need[@]}"
fi

# munge: a key, a socket directory it owns, the daemon.
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  [[ -s /etc/munge/munge.key ]] || { mkdir -p /etc/munge; dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; }
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge && chown munge:munge /run/munge /var/log/munge /var/lib/munge
  runuser -u munge -- munged --force
  for _ in $(seq 20); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
fi

host=$(hostname -s)
mkdir -p "$DIR"/{state,spool,log}
cat > "$CONF.new" <<CONF
# hvdbench test cluster (tools/slurm-up.sh): one node, everything local.
ClusterName=hvdbench
SlurmctldHost=$host
SlurmUser=root
SlurmctldPort=${HVDBENCH_SLURMCTLD_PORT:-16817}
SlurmdPort=${HVDBENCH_SLURMD_PORT:-16818}
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
KillWait=5
NodeName=$host CPUs=$CPUS RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
if [[ ! -f $CONF ]] || ! cmp -s "$CONF" "$CONF.new"; then
  mv "$CONF.new" "$CONF"
  pkill -f "slurmctld -f $CONF" 2>/dev/null || true
  pkill -f "slurmd -f $CONF" 2>/dev/null || true
  sleep 1
else
  rm -f "$CONF.new"
fi
export SLURM_CONF=$CONF
pgrep -f "slurmctld -f $CONF" >/dev/null || { log "starting slurmctld"; setsid slurmctld -f "$CONF" -c </dev/null; }
pgrep -f "slurmd -f $CONF" >/dev/null || { log "starting slurmd"; setsid slurmd -f "$CONF" </dev/null; }
for _ in $(seq 60); do
  state=$(sinfo -h -o %t 2>/dev/null | head -n1 || true)
  case $state in
    idle*|mix*|alloc*) echo "$CONF"; exit 0 ;;
    down*|drain*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 1
done
log "error: the node did not become idle (state '${state:-none}'); logs in $DIR/log"
exit 1
