#!/usr/bin/env bash
# The GPU checks of the CUDA backend in one device call (device time is scarce).
# Build on the workstation first (the GPU machine has no registry access):
#
#   cargo build --release && cargo test --release --no-run --test gpu_parity --test cuda_kernels
#   mkdir -p gpu-bin && cp target/release/tune gpu-bin/ && \
#     for t in gpu_parity cuda_kernels; do cp "$(ls -t target/release/deps/$t-* | grep -v '\.d$' | head -1)" gpu-bin/$t; done
#   strip gpu-bin/*        # the carry limit is 64 MiB in all
#
# then run, with gpu-bin carried:  bash scripts/gpu-session.sh   (results under $OUT)
set -uo pipefail
OUT="${OUT:-/tmp/gpu-out}"
mkdir -p "$OUT"
# The image ships CUDA libraries inside Python wheels: nvidia/*/lib folders.
site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null || true)
if [ -n "$site" ]; then
  dirs=$(ls -d "$site"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
  export TUNE_CUDA_LIB_DIRS="${dirs%:}"
fi
export TUNE_REQUIRE_GPU=1 TUNE_CACHE_DIR="$OUT/cache"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  ./gpu-bin/tune probe
} > "$OUT/probe.txt" 2>&1
./gpu-bin/cuda_kernels > "$OUT/cuda_kernels.txt" 2>&1; echo "cuda_kernels rc=$?" >> "$OUT/summary.txt"
./gpu-bin/gpu_parity --test-threads=1 --nocapture > "$OUT/gpu_parity.txt" 2>&1; echo "gpu_parity rc=$?" >> "$OUT/summary.txt"
for m in mlp cnn-small resnet-mini; do
  ./gpu-bin/tune train --device cuda --model "$m" --dataset synthetic --batch-size 128 \
    --steps 120 --warmup 20 --json > "$OUT/tune-$m.json" 2> "$OUT/tune-$m.err"
  echo "tune $m rc=$?" >> "$OUT/summary.txt"
done
python3 scripts/torch_gpu_bench.py --amp off,bf16 > "$OUT/torch.jsonl" 2> "$OUT/torch.err"
echo "torch rc=$?" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
