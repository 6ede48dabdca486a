#!/usr/bin/env bash
# The GPU check (docs/gpu-check.md): every GPU path of bench on one machine, into at most 8 files under OUT.
#
#   tools/gpu-check.sh [--short] [OUT]          (OUT default: $OUT, else results/gpu-check)
#
# On a GPU machine: installs bench from this tree with the wheels `make gpu-check-prepare` put in .gpu-check/
# (no download), then runs bench env, bench preflight, bench peak at each precision, ResNet-50 at Lambda's batch and layout, paper
# and --tuned side by side (ResNet-50 in amp-bf16 and amp-fp16, VGG-16 in amp-bf16), torch-single / torch-ddp on VGG-16 and
# ResNet-50 at 224x224 in fp32 (TF32), amp-bf16 and amp-fp16 (ResNet-50 also channels-last), ResNet-50 from JPEG
# files (--data) and bench data bench on them (DALI on the GPU where installed, and its losses with channels-last
# against the torch loader's), ResNet-20 to a target on the digits and resumed from its checkpoint, one Transformer, bench
# verify on two GPUs or more; last, builds Horovod with NCCL against the machine's PyTorch and runs torch-horovod
# the same, and Horovod's own PyTorch benchmark alternated with torch-horovod. NVML telemetry in every run; then a
# summary table. --short does the same on the CPU with tiny settings (the gpu_check tier runs it, make
# test-gpu-check, so the check cannot rot between the days a GPU is lent).
#
# Resumable: each step is done once per machine (its log and exit code in STATE; a failed step is recorded and
# not retried), and a call stops before a step once BUDGET seconds have passed (exit 3: run the same command
# again). Environment: HVDBENCH_GPU_CHECK_STATE (default /tmp/hvdbench-gpu-check, or a fresh folder per --short
# call under OUT), HVDBENCH_GPU_CHECK_BUDGET (default 480 s), HVDBENCH_GPU_CHECK_DIR (the prepared folder,
# default .gpu-check), HVDBENCH_GPU_CHECK_ONLY (shell patterns of step names, e.g. 'horovod torch-horovod-*
# reference': only those steps, and install, run; the others are left for a later call), PYTHON (default python3).
set -uo pipefail
SHORT=0
if [ "${1:-}" = "--short" ]; then SHORT=1; shift; fi
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(mkdir -p "${1:-${OUT:-results/gpu-check}}" && cd "${1:-${OUT:-results/gpu-check}}" && pwd)
PY=${PYTHON:-python3}
PREPARED=${HVDBENCH_GPU_CHECK_DIR:-$REPO/.gpu-check}
if [ "$SHORT" = 1 ]; then
  STATE=${HVDBENCH_GPU_CHECK_STATE:-$(mktemp -d "${TMPDIR:-/tmp}/hvdbench-gpu-check-short.XXXXXX")}
else
  STATE=${HVDBENCH_GPU_CHECK_STATE:-/tmp/hvdbench-gpu-check}
fi
BUDGET=${HVDBENCH_GPU_CHECK_BUDGET:-480}
read -ra ONLY <<< "${HVDBENCH_GPU_CHECK_ONLY:-}"   # read splits without expanding the patterns
RES=$STATE/results
mkdir -p "$STATE/done" "$STATE/logs" "$RES"
START=$SECONDS
export PYTHONPATH="$REPO:$STATE/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export PATH="$STATE/site/bin:$PATH"
BENCH=("$PY" -m bench)

log() { echo "gpu-check: $*"; }

pack() {
  "$PY" -m tools.gpu_check_summary "$RES" "$STATE/status.tsv" > "$OUT/summary.md" 2> "$STATE/logs/summary.err" \
    || log "the summary failed: $(tail -n1 "$STATE/logs/summary.err")"
  cp "$STATE/status.tsv" "$OUT/status.tsv" 2>/dev/null
  tar czf "$OUT/results.tar.gz" -C "$RES" . 2>/dev/null
  tar czf "$OUT/logs.tar.gz" -C "$STATE/logs" . 2>/dev/null
  [ -f "$STATE/logs/env.log" ] && cp "$STATE/logs/env.log" "$OUT/env.txt"
}

# step NAME COMMAND...: run once per machine; its exit code and seconds go to status.tsv.
step() {
  local name=$1 pattern wanted=1; shift
  [ -e "$STATE/done/$name" ] && return 0
  if [ "${#ONLY[@]}" -gt 0 ] && [ "$name" != install ]; then
    wanted=0
    for pattern in "${ONLY[@]}"; do [[ $name == $pattern ]] && wanted=1; done
    [ "$wanted" = 1 ] || return 0
  fi
  if (( SECONDS - START > BUDGET )); then
    log "stopped before '$name' after $((SECONDS - START)) s, to stay within one call's limit: run the same command again"
    pack
    exit 3
  fi
  local t0=$SECONDS rc
  "$@" > "$STATE/logs/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" "$(grep -m1 -E '^(error|gpu-check): ' "$STATE/logs/$name.log" | cut -c1-300)" \
    >> "$STATE/status.tsv"
  touch "$STATE/done/$name"
  if [ "$rc" = 0 ]; then log "$name: ok ($((SECONDS - t0)) s)"; else log "$name: FAILED (exit $rc): $(tail -n1 "$STATE/logs/$name.log" | cut -c1-200)"; fi
}

install_bench() {
  if "$PY" -c 'import pydantic' 2>/dev/null; then echo "pydantic is here already"; else
    ls "$PREPARED"/wheels/*.whl >/dev/null 2>&1 || { echo "gpu-check: no wheels in $PREPARED/wheels: run make gpu-check-prepare here first"; return 1; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$STATE/site" "$PREPARED"/wheels/*.whl || return 1
  fi
  "${BENCH[@]}" --version
}

build_horovod() {
  if "$PY" -c 'import horovod.torch' 2>/dev/null; then echo "Horovod with PyTorch is here already"; return 0; fi
  HVDBENCH_SDIST_DIR=$PREPARED HOROVOD_GPU=nccl HOROVOD_BUILD_CUDA_CC_LIST=${HOROVOD_BUILD_CUDA_CC_LIST:-90} \
    "$REPO/docker/build-horovod.sh" "$PY" \
    || { echo "gpu-check: Horovod did not build here (the torch-horovod runs and the reference comparison are skipped)"; return 1; }
}

has_horovod() { "$PY" -c 'import horovod.torch' 2>/dev/null; }

step install install_bench
if [ "$SHORT" = 1 ]; then
  DEVICE=(--device cpu); GPUS=2; PRECISIONS=(fp32); PEAKS=(fp32); SOAK=(--seconds 2 --window 0.5 --size 256)
  SIZE=(--image-size 32 --batch-size 2 --warmup-steps 1 --steps-per-window 2 --windows 2 --attribution-steps 0)
  MODELS=(vgg16)
  REF=(--models vgg16 --np 1 --batch-sizes 2 --repeats 1 --warmup 1 --batches-per-iter 1 --iters 1)
  TEXT=(--model transformer-small --precision amp-bf16 --batch-size 2 --seq-len 8 --warmup-steps 1 --steps-per-window 2
        --windows 2)
  VERIFY=(--framework torch --modes torch-ddp --steps 2 --model transformer-small)  # the exchange, on a small model
  DATA=(--model vgg16 --precision fp32); JPEGS=(--images 40 --image-size 48)
  DATA_BENCH=(--workers 1 --repeats 1 --image-size 32 --batch-size 4 --batches 4 --warmup 1)
  CONVERGE=(--image-size 12 --batch-size 32 --epochs 2 --target-accuracy 0.95 --loader-workers 1 --checkpoint-every 1)
  LOSS=(--model vgg16 --precision fp32 --image-size 32 --batch-size 2 --epochs 1)
else
  DEVICE=(--device cuda); GPUS=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
  [ "${GPUS:-0}" -ge 1 ] || { log "no GPU visible to PyTorch: nothing to check (run with --short for the CPU)"; exit 1; }
  PRECISIONS=(fp32 amp-bf16 amp-fp16); PEAKS=(fp32 amp-bf16 amp-fp16); SOAK=(--seconds 60 --precision amp-bf16)
  SIZE=(--image-size 224 --batch-size 64)
  MODELS=(vgg16 resnet50)
  # Horovod's script's own lengths (10 warm-up batches, 10 iterations of 10): a few steps time a GPU badly.
  REF=(--cuda --models vgg16 resnet50 --np "$GPUS" --batch-sizes 64 --repeats 2 --warmup 10 --batches-per-iter 10
       --iters 10)
  TEXT=(--model transformer-base --precision amp-bf16)
  VERIFY=(--framework torch)
  DATA=(--model resnet50 --precision amp-bf16); JPEGS=(--images 4096)
  CORES=$(nproc); DATA_BENCH=(--workers "1,4$( [ "$CORES" -gt 4 ] && echo ",$CORES")" --repeats 2 --gpus "$GPUS")
  CONVERGE=(--image-size 32 --batch-size 32 --epochs 10 --target-accuracy 0.95 --base-lr 0.8 --warmup-epochs 1
            --checkpoint-every 1)
  LOSS=(--model resnet50 --precision amp-bf16 --image-size 224 --batch-size 64 --epochs 2)
fi

step env "${BENCH[@]}" env
step preflight "${BENCH[@]}" preflight  # NVML's process, ECC and remap queries on real GPUs (exit 1 on a finding)
for p in "${PEAKS[@]}"; do step "peak-$p" "${BENCH[@]}" peak "${DEVICE[@]}" --precision "$p" --output "$RES"; done
# Every GPU under a sustained load, judged as operators accept a node (docs/soak.md; exit 1 on an error finding).
step soak "${BENCH[@]}" soak "${DEVICE[@]}" "${SOAK[@]}" --output "$RES"
# First in the window: paper and tuned side by side (docs/profiles.md), and ResNet-50 at Lambda's own
# batch and layout (NCHW, eager) for the ratio to their published figure, like for like. The paper's runs carry
# the names of the loop's below, which then skips them.
if [ "$SHORT" = 1 ]; then
  LAMBDA=(); SIDE=("vgg16 fp32"); TUNED=("${SIZE[@]}")
else
  LAMBDA=("amp-fp16 1280" "fp32 640"); SIDE=("resnet50 amp-bf16" "resnet50 amp-fp16" "vgg16 amp-bf16")
  TUNED=(--image-size 224)  # --tuned's own batch (256)
fi
for run in "${LAMBDA[@]}"; do
  read -r p b <<< "$run"
  step "lambda-resnet50-$p" "${BENCH[@]}" torch-single "${DEVICE[@]}" --model resnet50 --precision "$p" --batch-size "$b" --image-size 224 --output "$RES"
done
for run in "${SIDE[@]}"; do
  read -r model p <<< "$run"
  step "torch-single-$model-$p" "${BENCH[@]}" torch-single "${DEVICE[@]}" --model "$model" --precision "$p" "${SIZE[@]}" --output "$RES"
  step "tuned-$model-$p" "${BENCH[@]}" torch-single "${DEVICE[@]}" --tuned --model "$model" --precision "$p" "${TUNED[@]}" --output "$RES"
done
for model in "${MODELS[@]}"; do
  for p in "${PRECISIONS[@]}"; do
    step "torch-single-$model-$p" "${BENCH[@]}" torch-single "${DEVICE[@]}" --model "$model" --precision "$p" "${SIZE[@]}" --output "$RES"
    step "torch-ddp-$model-$p" "${BENCH[@]}" torch-ddp "${DEVICE[@]}" --np "$GPUS" --model "$model" --precision "$p" "${SIZE[@]}" --output "$RES"
    if [ "$model" = resnet50 ] && [ "$p" != fp32 ]; then
      step "torch-ddp-$model-$p-channels-last" "${BENCH[@]}" torch-ddp "${DEVICE[@]}" --np "$GPUS" --model "$model" --precision "$p" --channels-last "${SIZE[@]}" --output "$RES"
    fi
  done
done
# Real data (docs/data.md): ImageNet-sized JPEGs through the DataLoader with pinned memory and the timed copy, against
# the synthetic run of the same settings above (bench compare gives the input pipeline's cost).
step data-make "${BENCH[@]}" data make "$STATE/jpegs" "${JPEGS[@]}"
# traced after its windows (--trace: torch.profiler with CUDA kernels and NVTX ranges, one file per rank)
step torch-ddp-data "${BENCH[@]}" torch-ddp "${DEVICE[@]}" --np "$GPUS" "${DATA[@]}" "${SIZE[@]}" --data "$STATE/jpegs" --trace 5 --output "$RES"
# ... and with one loader worker, a pipeline slower than training on purpose: its input section gives the host's
# wait and the device's idle for data side by side (docs/data.md: on a GPU the idle is the input's cost).
step torch-ddp-data-slow-loader "${BENCH[@]}" torch-ddp "${DEVICE[@]}" --np "$GPUS" "${DATA[@]}" "${SIZE[@]}" --data "$STATE/jpegs" --loader-workers 1 --output "$RES"
# The input pipeline alone on the same files (docs/data-pipelines.md): the DataLoader per worker count, and DALI
# decoding on the GPU (nvJPEG, --device auto) where the machine has DALI.
LOADERS=torch; "$PY" -c 'import nvidia.dali' 2>/dev/null && LOADERS=torch,dali
step data-bench "${BENCH[@]}" data bench "$STATE/jpegs" --loaders "$LOADERS" "${DATA_BENCH[@]}" --output "$RES"
# DALI with channels-last (its batch written on the compute stream, converted on the copy stream: the stream rule in
# docs/data-pipelines.md) against the torch loader on the same files in the same order, each to the same epochs;
# the summary holds their training and held-out losses side by side (a batch read before it was written shows as a
# loss far off, or NaN). Where the machine has DALI.
if [ "$LOADERS" = torch,dali ]; then
  for loader in dali torch; do
    step "loss-$loader-channels-last" "${BENCH[@]}" torch-ddp "${DEVICE[@]}" --np "$GPUS" "${LOSS[@]}" --data "$STATE/jpegs" --loader "$loader" --channels-last --output "$RES/loaders"
  done
fi
# Training to a target (docs/training.md): ResNet-20 on scikit-learn's digits, time to 95% held-out top-1.
step digits-make "${BENCH[@]}" data make "$STATE/digits" --format cifar --from digits
step torch-ddp-converge "${BENCH[@]}" torch-ddp "${DEVICE[@]}" --np "$GPUS" --model resnet20 "${CONVERGE[@]}" --data "$STATE/digits" --output "$RES"
# ... and resumed from its last checkpoint (the epoch before the one that ended it) on the GPU: the same target.
ckpt=("$RES/checkpoints/torch-ddp-np$GPUS"-*)  # the converge run's folder: <mode>-np<N>-<its configuration's key>
step torch-ddp-resume "${BENCH[@]}" torch-ddp "${DEVICE[@]}" --np "$GPUS" --model resnet20 "${CONVERGE[@]}" --data "$STATE/digits" \
  --resume-from "${ckpt[0]}" --output "$RES/resumed"
step transformer "${BENCH[@]}" torch-ddp "${DEVICE[@]}" --np "$GPUS" "${TEXT[@]}" --output "$RES"
if [ "$GPUS" -ge 2 ]; then
  step verify "${BENCH[@]}" verify "${DEVICE[@]}" "${VERIFY[@]}" --output "$RES"
fi
# Horovod last: its build takes minutes of a lease, and every figure above needs none of it.
[ "$SHORT" = 1 ] || step horovod build_horovod
if has_horovod; then
  for model in "${MODELS[@]}"; do
    for p in "${PRECISIONS[@]}"; do
      step "torch-horovod-$model-$p" "${BENCH[@]}" torch-horovod "${DEVICE[@]}" --np "$GPUS" --model "$model" --precision "$p" "${SIZE[@]}" --output "$RES"
    done
  done
  step reference "$PY" -m tools.benchmarks.reference --frameworks torch "${REF[@]}" --json "$RES/reference.json"
fi
pack
failed=$(awk -F'\t' '$2 != 0' "$STATE/status.tsv" | wc -l)
log "done in $((SECONDS - START)) s this call; $failed step(s) failed; $(ls "$OUT" | wc -l) files in $OUT"
[ "$failed" = 0 ]
