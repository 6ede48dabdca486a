# Sourced by the hvdbench batch scripts: container runtime, network settings, results directory.
#
#   HVDBENCH_RUNTIME   apptainer (default) | singularity | none (run the installed bench natively)
#   HVDBENCH_SIF       the image (default ./hvdbench.sif: make sif links it to the SIF it built; or apptainer pull)
#   HVDBENCH_RESULTS   results directory on a shared filesystem (default ./results)
#   BENCH_ARGS         extra bench options, e.g. "--model resnet50 --precision amp-bf16"
#   HVDBENCH_DATA      a dataset folder to train from (--data; bound read-only into the image at the same path)
# Network settings users trip on, passed through when set (see the README):
#   NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE, NCCL_IB_HCA, NCCL_NET_GDR_LEVEL, NCCL_DEBUG (default WARN),
#   OMPI_MCA_btl_tcp_if_include, OMPI_MCA_pml, UCX_NET_DEVICES, HOROVOD_GLOO_IFACE
set -euo pipefail
HVDBENCH_RUNTIME=${HVDBENCH_RUNTIME:-apptainer}
HVDBENCH_SIF=${HVDBENCH_SIF:-$PWD/hvdbench.sif}
HVDBENCH_RESULTS=${HVDBENCH_RESULTS:-$PWD/results}
BENCH_ARGS=${BENCH_ARGS:-}
HVDBENCH_DATA=${HVDBENCH_DATA:-}
if [[ -n $HVDBENCH_DATA ]]; then
  [[ -d $HVDBENCH_DATA ]] || { echo "hvdbench: HVDBENCH_DATA=$HVDBENCH_DATA is not a folder" >&2; exit 1; }
  BENCH_ARGS="$BENCH_ARGS --data $HVDBENCH_DATA"
fi
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
mkdir -p "$HVDBENCH_RESULTS"

case $HVDBENCH_RUNTIME in
  apptainer|singularity)
    command -v "$HVDBENCH_RUNTIME" >/dev/null || { echo "hvdbench: $HVDBENCH_RUNTIME is not on PATH" >&2; exit 1; }
    [[ -f $HVDBENCH_SIF ]] || { echo "hvdbench: no image at $HVDBENCH_SIF (HVDBENCH_SIF)" >&2; exit 1; }
    # Before any task starts: the image opens and has bench (about a second). If not, the runtime's own
    # last line says why (no bench in it, not an image, a bind that cannot be made).
    if ! why=$("$HVDBENCH_RUNTIME" exec "$HVDBENCH_SIF" bench --version 2>&1 >/dev/null); then
      why=$(printf '%s\n' "$why" | grep -v '^ *$' | tail -n1 | tr -s ' \t' ' ')
      echo "hvdbench: $HVDBENCH_RUNTIME cannot run bench from $HVDBENCH_SIF: ${why:-no reason given}" >&2; exit 1
    fi
    # --nv: the host's driver and GPUs; the results directory bound at the same path (and the dataset, read-only).
    BINDS=(--bind "$HVDBENCH_RESULTS")
    if [[ -n $HVDBENCH_DATA ]]; then BINDS+=(--bind "$HVDBENCH_DATA:$HVDBENCH_DATA:ro"); fi
    RUN=("$HVDBENCH_RUNTIME" exec --nv "${BINDS[@]}" "$HVDBENCH_SIF" bench) ;;
  none)
    command -v bench >/dev/null || { echo "hvdbench: bench is not on PATH (HVDBENCH_RUNTIME=none)" >&2; exit 1; }
    RUN=(bench) ;;
  *)
    echo "hvdbench: HVDBENCH_RUNTIME must be apptainer, singularity or none (got '$HVDBENCH_RUNTIME')" >&2
    exit 1 ;;
esac

# Rendezvous for DDP and anything else that wants one: the allocation's first node, and the first port of the
# job's own range of 64 (bench.launching.slurm.job_port_base: jobs sharing a node never share a port).
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
MASTER_PORT=$((20000 + 64 * (SLURM_JOB_ID % 190)))
export MASTER_ADDR MASTER_PORT
echo "hvdbench: job $SLURM_JOB_ID on $SLURM_JOB_NUM_NODES node(s), $SLURM_NTASKS task(s); runtime $HVDBENCH_RUNTIME; rendezvous $MASTER_ADDR:$MASTER_PORT; results in $HVDBENCH_RESULTS" >&2
