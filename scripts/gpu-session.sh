#!/usr/bin/env bash
# Everything the CUDA backend must show on a real GPU, in one device call (device time
# is scarce). Build on the workstation first (the GPU machine has no registry access):
#
#   T="gpu_parity gpu_amp gpu_autotune gpu_cudnn gpu_cudnn_standin gpu_optim gpu_ddp gpu_nccl_standin knobs cuda_kernels"
#   cargo build --release && cargo test --release --no-run $(for t in $T; do printf -- '--test %s ' $t; done)
#   mkdir -p gpu-bin && cp target/release/tune gpu-bin/ && for t in $T; do
#     cp "$(ls -t target/release/deps/$t-* | grep -v '\.d$' | head -1)" gpu-bin/$t; done
#   strip gpu-bin/*        # the carry limit is 64 MiB in all; split the tests over two
#                          # calls (GPU_SESSION_PARTS=tests, then =runs) if it is exceeded
#
# then run, with gpu-bin carried:  bash scripts/gpu-session.sh   (results under $OUT)
#
# What it does, each step's exit status in $OUT/summary.txt:
#  1. the device (NVML: name, driver, CUDA driver version) and `tune probe`;
#  2. every GPU test under TUNE_REQUIRE_GPU=1 (a skip is a failure): kernels to PTX and
#     CUBIN, layer/GEMM/loss-curve parity with the CPU backend, AMP bf16/fp16 loss
#     tracking against the CPU's AMP and f32, TF32, the device-side loss scaler, the
#     optimizers, autotune's cuBLASLt choices, conv2d through cuDNN against im2col (and
#     its autotuned algorithms), the one-engine knob tests, DDP over NCCL
#     on every GPU there is (world size 1 on a one-GPU machine) against the CPU's DDP;
#  3. `tune train --device cuda` per model under fp32, bf16, fp16 and tf32 with held-out
#     accuracy (AMP must reach fp32's accuracy), and once with autotune (its choices);
#     the CNNs again with TUNE_CUDNN=0 (im2col + cuBLASLt) to time cuDNN against it;
#  3b. `tune train --parallel ddp --devices <GPUs>` (NCCL through tune's re-exec with its
#     private libnccl.so link), fp32 and bf16, with SyncBatchNorm, and `--parallel dp`
#     (fp32, and bf16 with autotune), with the per-device summaries, and under torchrun
#     one process per GPU where there are 2 or more;
#  4. `tune sweep --device cuda` of experiments/seed-knobs.toml on the GPU (with
#     tf32 added to amp): every knob;
#  5. PyTorch eager, same models, batch and knobs, fp32, bf16 autocast and tf32;
#  6. reports/gpu/<date>-<gpu>.md from all of it (scripts/gpu_report.py): the step-time
#     ratio tune / PyTorch per model and precision, for docs/performance.md.
set -uo pipefail
OUT="${OUT:-/tmp/gpu-out}"
PARTS="${GPU_SESSION_PARTS:-tests,runs}"
mkdir -p "$OUT"
# The image ships CUDA libraries inside Python wheels: nvidia/*/lib folders.
site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null || true)
if [ -n "$site" ]; then
  dirs=$(ls -d "$site"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
  export TUNE_CUDA_LIB_DIRS="${dirs%:}"
fi
export TUNE_REQUIRE_GPU=1 TUNE_CACHE_DIR="$OUT/cache"
unset TUNE_CUDA_STANDIN   # never the CPU stand-in here
step() { # name, command...: runs it, output to $OUT/<name>.txt, status to summary.txt
  local name=$1; shift
  "$@" > "$OUT/$name.txt" 2>&1
  echo "$name rc=$?" >> "$OUT/summary.txt"
}
{
  python3 scripts/gpu_report.py --device-json
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  ./gpu-bin/tune probe
} > "$OUT/probe.txt" 2>&1

if [[ ",$PARTS," == *",tests,"* ]]; then
  step cuda_kernels ./gpu-bin/cuda_kernels --nocapture
  for t in gpu_optim gpu_amp gpu_autotune gpu_cudnn gpu_cudnn_standin gpu_parity gpu_ddp knobs; do
    step "$t" "./gpu-bin/$t" --test-threads=1 --nocapture
  done
fi

if [[ ",$PARTS," == *",runs,"* ]]; then
  for m in mlp cnn-small resnet-mini; do
    for amp in off bf16 fp16 tf32; do
      # shapes:6000 has a held-out split: accuracy per precision, same steps and seed.
      ./gpu-bin/tune train --device cuda --model "$m" --dataset shapes:6000 --batch-size 128 \
        --steps 300 --warmup 20 --amp "$amp" --json > "$OUT/tune-$m-$amp.json" 2> "$OUT/tune-$m-$amp.err"
      echo "tune $m amp=$amp rc=$?" >> "$OUT/summary.txt"
    done
    ./gpu-bin/tune train --device cuda --model "$m" --dataset synthetic --batch-size 128 \
      --steps 60 --warmup 20 --autotune --json > "$OUT/tune-$m-autotune.json" 2> "$OUT/tune-$m-autotune.err"
    echo "tune $m autotune rc=$?" >> "$OUT/summary.txt"
    [ "$m" = mlp ] && continue
    for amp in off bf16; do
      for path in cudnn im2col; do
        TUNE_CUDNN=$([ $path = im2col ] && echo 0 || echo 1) ./gpu-bin/tune train --device cuda \
          --model "$m" --dataset synthetic --batch-size 128 --steps 60 --warmup 20 --amp "$amp" --json \
          > "$OUT/conv-$m-$amp-$path.json" 2> "$OUT/conv-$m-$amp-$path.err"
        echo "conv $m amp=$amp $path rc=$?" >> "$OUT/summary.txt"
      done
    done
  done
  ngpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
  for amp in off bf16; do
    ./gpu-bin/tune train --device cuda --parallel ddp --devices "$ngpu" --model cnn-small \
      --dataset synthetic --batch-size $((64 * ngpu)) --steps 60 --warmup 20 --amp "$amp" --json \
      > "$OUT/tune-ddp-$amp.json" 2> "$OUT/tune-ddp-$amp.err"
    echo "tune ddp x$ngpu amp=$amp rc=$?" >> "$OUT/summary.txt"
  done
  # SyncBatchNorm over NCCL (world size 1 on one GPU: NCCL refuses two ranks of one
  # communicator on one GPU, so nothing here can fake a second device).
  ./gpu-bin/tune train --device cuda --parallel ddp --devices "$ngpu" --sync-bn --model resnet-mini \
    --dataset synthetic --batch-size $((64 * ngpu)) --steps 60 --warmup 20 --amp bf16 --json \
    > "$OUT/tune-ddp-syncbn.json" 2> "$OUT/tune-ddp-syncbn.err"
  echo "tune ddp x$ngpu sync_bn bf16 rc=$?" >> "$OUT/summary.txt"
  for extra in "" "--amp bf16 --autotune"; do
    tag=$( [ -z "$extra" ] && echo dp || echo dp-bf16-autotune )
    # shellcheck disable=SC2086 # $extra is a list of flags
    ./gpu-bin/tune train --device cuda --parallel dp --devices "$ngpu" --model cnn-small \
      --dataset synthetic --batch-size $((64 * ngpu)) --steps 60 --warmup 20 $extra --json \
      > "$OUT/tune-$tag.json" 2> "$OUT/tune-$tag.err"
    echo "tune $tag x$ngpu rc=$?" >> "$OUT/summary.txt"
  done
  # Multi-process DDP, one process per GPU under real torchrun: needs 2 GPUs (NCCL
  # refuses two ranks on one GPU), so a one-GPU machine records that it did not run.
  if [ "$ngpu" -ge 2 ]; then
    python3 -m torch.distributed.run --nproc-per-node "$ngpu" --no-python ./gpu-bin/tune train \
      --device cuda --parallel ddp --model cnn-small --dataset synthetic \
      --batch-size $((64 * ngpu)) --steps 60 --warmup 20 --json \
      > "$OUT/tune-ddp-torchrun.json" 2> "$OUT/tune-ddp-torchrun.err"
    echo "tune ddp torchrun x$ngpu rc=$?" >> "$OUT/summary.txt"
  else
    echo "tune ddp torchrun: not run (one GPU; multi-process DDP needs 2)" >> "$OUT/summary.txt"
  fi
  sed -e 's/^name = "seed-knobs"/name = "seed-knobs-cuda"/' \
      -e 's/^amp = \["off", "bf16", "fp16"\]/amp = ["off", "bf16", "fp16", "tf32"]/' \
      experiments/seed-knobs.toml > "$OUT/seed-knobs-cuda.toml"
  step sweep ./gpu-bin/tune sweep "$OUT/seed-knobs-cuda.toml" --device cuda --out "$OUT/sweep"
  python3 scripts/torch_gpu_bench.py --amp off,bf16,tf32 > "$OUT/torch.jsonl" 2> "$OUT/torch.err"
  echo "torch rc=$?" >> "$OUT/summary.txt"
  step report python3 scripts/gpu_report.py --out-dir "$OUT" --write "$OUT/report.md"
fi
cat "$OUT/summary.txt"
