#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one command: the CUDA tests, bench_gpu.py, and a full
# `train` of msu-schizophrenia on the GPU (its metrics beside the CPU's, its wall time).
#
#   benchmarks/gpu_checks.sh PREP-MSU OUT_DIR [PYTHON]
#
# PREP-MSU is `eegformer preprocess ../shared/data/msu-schizophrenia --out PREP-MSU`; OUT_DIR gets
# one log per step (cuda-tests.log, bench_gpu.log/.json, train-cuda.log, the run's metrics.json).
# Each step has its own time limit, so that one slow step still leaves the others' figures.
set -uo pipefail
prep=${1:?PREP-MSU folder}
out=${2:?output folder}
python=${3:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
torch.cuda.get_device_name(0), "bf16", torch.cuda.is_bf16_supported())'; } 2>&1 | tee "$out/device.txt"

# 1. Every test with "cuda" in its id (the cuda-marked ones and the CPU/CUDA comparisons).
timeout 170 "$python" -m pytest -q -p no:cacheprovider -k cuda -rs tests 2>&1 \
  | tee "$out/cuda-tests.log" | tail -n 15
echo "cuda tests: rc ${PIPESTATUS[0]}"

# 2. The GPU benchmark without its CV row (step 3 is that row, through the CLI).
timeout 120 "$python" benchmarks/bench_gpu.py --device cuda --json "$out/bench_gpu.json" \
  > "$out/bench_gpu.log" 2>&1
echo "bench_gpu: rc $?"; cat "$out/bench_gpu.log"

# 3. msu, default preset, 5-fold CV and the final model, on the GPU (split seed 0: the same
#    folds as the CPU figures of docs/benchmarks.md, to compare, not to select).
start=$EPOCHREALTIME
timeout 170 "$python" -m eegformer_cli train "$prep" --out /tmp/run-cuda -l diagnosis \
  --device cuda --overwrite > "$out/train-cuda.log" 2>&1
rc=$?
echo "train on cuda: rc $rc, $("$python" -c "print(round($EPOCHREALTIME - $start, 1))") s"
tail -n 25 "$out/train-cuda.log"
cp /tmp/run-cuda/metrics.json "$out/metrics-cuda.json" 2>/dev/null
cp /tmp/run-cuda/config.json "$out/config-cuda.json" 2>/dev/null
