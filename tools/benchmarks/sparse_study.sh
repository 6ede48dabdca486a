#!/usr/bin/env bash
# Seed 004's question on this machine: parameter server vs allreduce (and Horovod vs native) vs Parallax's
# hybrid (torch-hybrid) for a Transformer with a small and a large vocabulary, its embedding gradient dense
# (tied, the paper's model), sparse, or sparse reduced as dense. One bench sweep per (vocabulary, embedding),
# the hybrid in the sparse ones, then one report over all of them, whose "Bytes moved per step" section checks
# the computed traffic against the hosts' interface counters, bench predict (allreduce + allgather, and the
# hybrid's all-to-all) against the collective modes, and tools/benchmarks/hybrid_study.py: the four architectures
# side by side, with repeats.
#
#   tools/benchmarks/sparse_study.sh [OUT] [extra bench sweep options]     (make sparse-study OUT=... ARGS=...)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-results/sparse-study}
shift || true
BENCH=${BENCH:-.venv/bin/bench}
MODEL=${MODEL:-transformer-small}
MODES=${MODES:-torch-ddp,torch-horovod,tf-horovod,tf-native:multiworker,tf-native:ps}
HYBRID=${HYBRID:-torch-hybrid}  # in the sparse sweeps (it trains the untied model); empty to leave it out
REPEATS=${REPEATS:-3}
VOCABS=${VOCABS:-1000 37000}
# One core per rank at n = 1 and n = 2, so a rank computes as fast alone as beside another (as a GPU
# would) and n = 2 against n = 1 shows what the exchange costs; OMP_NUM_THREADS=0 leaves the frameworks' own.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
[ "$OMP_NUM_THREADS" = 0 ] && unset OMP_NUM_THREADS
COMMON=(--models "$MODEL" --np 1,2 --warmup-steps 2 --steps-per-window 4 --windows 4 "$@")

for vocab in $VOCABS; do
  for embedding in dense sparse sparse-as-dense; do
    case $embedding in
      dense) flags=() ;;
      sparse) flags=(--sparse-embeddings) ;;
      sparse-as-dense) flags=(--sparse-embeddings --sparse-as-dense) ;;
    esac
    modes=$MODES
    [ "$embedding" = sparse ] && [ -n "$HYBRID" ] && modes=$MODES,$HYBRID
    "$BENCH" sweep "${COMMON[@]}" --modes "$modes" --num-classes "$vocab" "${flags[@]}" \
      --output "$OUT/vocab$vocab-$embedding"
  done
done
# The network inputs of bench predict: each backend's allreduce near the dense gradients (0.9 to 40 MB
# here) and allgather near the sparse ones (S = 2 x 8 x 32 rows x (256 + index) bytes, about 135 KB).
for backend in torch horovod-torch horovod-tf tf; do
  "$BENCH" allreduce --backend "$backend" --min-bytes 512K --max-bytes 32M --factor 4 --models "" \
    --output "$OUT/network"
  "$BENCH" allreduce --backend "$backend" --op allgather --min-bytes 32K --max-bytes 512K --factor 4 --models "" \
    --output "$OUT/network"
done
# The hybrid's table: R = 2 x 8 x 32 lookups x (8 + 8 x 64) bytes, about 266 KB, through torch.distributed.
[ -n "$HYBRID" ] && "$BENCH" allreduce --backend torch --op alltoall --min-bytes 32K --max-bytes 2M --factor 4 \
  --models "" --output "$OUT/network"
folders=("$OUT"/vocab*)
"$BENCH" report "${folders[@]}" --output "$OUT/report"
network=()
for f in "$OUT"/network/*.json; do network+=(--allreduce "$f"); done
for folder in "${folders[@]}"; do
  COLUMNS=250 "$BENCH" predict --sweep "$folder" --overlap 0 "${network[@]}"
done | tee "$OUT/report/predict.txt"
"$(dirname "$BENCH")/python" -m tools.benchmarks.hybrid_study --repeats "$REPEATS" --vocabs "${VOCABS// /,}" \
  | tee "$OUT/report/four-architectures.md"
echo "report: $OUT/report/report.md"
