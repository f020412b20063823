#!/usr/bin/env bash
# Everything the CUDA backend must show on a real GPU, in one device call (device time
# is scarce: 15 minutes a session, the machine's start included). Build on the
# workstation first (the GPU machine has no registry access and may have no Rust):
#
#   bash scripts/gpu-build.sh      # gpu-bin/: tune and the GPU test binaries, stripped
#
# then run, with gpu-bin carried:  bash scripts/gpu-session.sh
#
# Every step has a time limit, and the whole session a budget (GPU_BUDGET_S, default
# 480 s): a step that would start past it is recorded as not run. The results travel back
# as one archive, $OUT/gpu.tgz (the device tool returns at most 8 files), rewritten after
# every phase, so a call cut short still returns what had finished; $OUT/summary.txt and
# $OUT/report.md beside it. GPU_SESSION_PARTS picks phases (default: all of them).
#
#  probe:    the device (NVML: name, driver, CUDA driver version), nvidia-smi, `tune probe`;
#  tests:    every GPU test binary under TUNE_REQUIRE_GPU=1 (a skip is a failure), all at
#            once (they check values, not time; each has its own kernel cache): kernels
#            to PTX and CUBIN, layer/GEMM/loss-curve parity with the CPU backend, AMP,
#            the optimizers, autotune, cuDNN against im2col, the knob tests, DDP over NCCL;
#  runs:     `tune train --device cuda` per model under fp32, bf16, fp16 and tf32 with
#            held-out accuracy, autotune's choices, the CNNs with TUNE_CUDNN=0 (im2col +
#            cuBLASLt) against cuDNN, DDP (with SyncBatchNorm) and DP over every GPU;
#  synth:    tune on a fixed batch on the GPU (--dataset synthetic) and PyTorch eager on
#            random tensors there, same models, batch and precisions: the step-time ratio;
#  energy:   `tune sweep` of a small spec on the GPU with NVML's energy per sample, beside
#            nvidia-smi's power and NVML's energy counter sampled by a separate process
#            (scripts/gpu_energy.py), for the comparison in the report;
#  fidelity: scripts/fidelity.py --device cuda: each knob's effect on the engine against
#            its effect on PyTorch, same model and batch;
#  sweep:    `tune sweep experiments/seed-knobs.toml --device cuda` (every knob).
# The report, reports/gpu/<date>-<gpu>.md, is written from the archive on the
# workstation: python3 scripts/gpu_report.py --out-dir DIR.
set -uo pipefail
RESULT="${OUT:-/tmp/gpu-out}"
W=/tmp/gpu-work
PARTS="${GPU_SESSION_PARTS:-probe,tests,runs,synth,energy,fidelity,sweep}"
TESTS="${GPU_TESTS:-cuda_kernels gpu_optim gpu_amp gpu_autotune gpu_cudnn gpu_cudnn_standin gpu_parity gpu_ddp knobs}"
BUDGET="${GPU_BUDGET_S:-480}"
START=$(date +%s)
rm -rf "$W"
mkdir -p "$RESULT" "$W"
: > "$W/summary.txt"

# The test binaries carry the absolute paths of the checkout they were built in
# (CARGO_MANIFEST_DIR, CARGO_BIN_EXE_tune): that path is made to lead here.
built_in=$(cat gpu-bin/manifest_dir 2>/dev/null || true)
if [ -n "$built_in" ] && [ ! -e "$built_in" ]; then
  mkdir -p "$(dirname "$built_in")" && ln -s "$PWD" "$built_in"
fi
mkdir -p target/release && cp gpu-bin/tune target/release/tune

# The image ships CUDA libraries inside Python wheels: nvidia/*/lib folders.
site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null || true)
if [ -n "$site" ]; then
  dirs=$(ls -d "$site"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
  export TUNE_CUDA_LIB_DIRS="${dirs%:}"
fi
export TUNE_REQUIRE_GPU=1 TUNE_CACHE_DIR="$W/cache"
unset TUNE_CUDA_STANDIN   # never the CPU stand-in here

left() { echo $((BUDGET - ($(date +%s) - START))); }
note() { echo "$*" >> "$W/summary.txt"; }
# The kernel caches and the HTML and trace files stay behind: the archive must stay under
# the tool's 16 MiB a file (the first session's, with them, did not come back).
pack() {
  cp "$W/summary.txt" "$RESULT/summary.txt"
  tar czf "$RESULT/gpu.tgz.part" --exclude='./cache*' --exclude='*trace.json' --exclude='*.html' -C "$W" . &&
    mv "$RESULT/gpu.tgz.part" "$RESULT/gpu.tgz"
}
want() { [[ ",$PARTS," == *",$1,"* ]]; }
# run NAME LIMIT_S CMD...: output to $W/NAME.txt, status and seconds to summary.txt;
# skipped (said so) when the budget cannot hold it.
run() {
  local name=$1 lim=$2; shift 2
  if [ "$(left)" -lt 5 ]; then note "$name: not run (session budget spent)"; return; fi
  [ "$lim" -gt "$(left)" ] && lim=$(left)
  local t0; t0=$(date +%s)
  timeout -k 5 "$lim" "$@" > "$W/$name.txt" 2>&1
  note "$name rc=$? ${lim}s-limit $(( $(date +%s) - t0 ))s"
}

if want probe; then
  run probe 60 bash -c 'python3 scripts/gpu_report.py --device-json; nvidia-smi;
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv;
    echo "TUNE_CUDA_LIB_DIRS=$TUNE_CUDA_LIB_DIRS"; ./gpu-bin/tune probe'
  pack
fi

if want tests; then
  for t in $TESTS; do
    [ -x "gpu-bin/$t" ] || { note "$t: binary missing from gpu-bin"; continue; }
    ( TUNE_CACHE_DIR="$W/cache-$t" run "$t" 180 "./gpu-bin/$t" --test-threads=2 --nocapture ) &
  done
  wait
  pack
fi

ngpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
[ "$ngpu" -ge 1 ] || ngpu=1
if want runs; then
  for m in mlp cnn-small resnet-mini; do
    for amp in off bf16 fp16 tf32; do
      # shapes:6000 has a held-out split: accuracy per precision, same steps and seed.
      run "tune-$m-$amp" 60 bash -c "./gpu-bin/tune train --device cuda --model $m --dataset shapes:6000 \
        --batch-size 128 --steps 300 --warmup 20 --amp $amp --json > $W/tune-$m-$amp.json"
    done
    run "tune-$m-autotune" 60 bash -c "./gpu-bin/tune train --device cuda --model $m --dataset synthetic \
      --batch-size 128 --steps 60 --warmup 20 --autotune --json > $W/tune-$m-autotune.json"
    [ "$m" = mlp ] && continue
    for amp in off bf16; do
      for path in cudnn im2col; do
        run "conv-$m-$amp-$path" 60 env TUNE_CUDNN="$([ $path = im2col ] && echo 0 || echo 1)" bash -c \
          "./gpu-bin/tune train --device cuda --model $m --dataset synthetic --batch-size 128 --steps 60 \
           --warmup 20 --amp $amp --json > $W/conv-$m-$amp-$path.json"
      done
    done
  done
  for amp in off bf16; do
    run "tune-ddp-$amp" 90 bash -c "./gpu-bin/tune train --device cuda --parallel ddp --devices $ngpu \
      --model cnn-small --dataset synthetic --batch-size $((64 * ngpu)) --steps 60 --warmup 20 --amp $amp \
      --json > $W/tune-ddp-$amp.json"
  done
  # SyncBatchNorm over NCCL (world size 1 on one GPU: NCCL refuses two ranks of one
  # communicator on one GPU, so nothing here can fake a second device).
  run tune-ddp-syncbn 90 bash -c "./gpu-bin/tune train --device cuda --parallel ddp --devices $ngpu --sync-bn \
    --model resnet-mini --dataset synthetic --batch-size $((64 * ngpu)) --steps 60 --warmup 20 --amp bf16 \
    --json > $W/tune-ddp-syncbn.json"
  run tune-dp 90 bash -c "./gpu-bin/tune train --device cuda --parallel dp --devices $ngpu --model cnn-small \
    --dataset synthetic --batch-size $((64 * ngpu)) --steps 60 --warmup 20 --json > $W/tune-dp.json"
  [ "$ngpu" -ge 2 ] || note "tune ddp torchrun: not run (one GPU; multi-process DDP needs 2)"
  pack
fi

# tune and PyTorch eager side by side in one phase, on the same footing: a fixed batch
# already on the GPU (tune's synthetic dataset, the bench's random tensors), no loader.
if want synth; then
  for m in mlp cnn-small resnet-mini; do
    for amp in off bf16 tf32; do
      run "synth-$m-$amp" 60 bash -c "./gpu-bin/tune train --device cuda --model $m --dataset synthetic \
        --batch-size 128 --steps 100 --warmup 20 --amp $amp --no-eval --json > $W/synth-$m-$amp.json"
    done
  done
  run torch 120 bash -c "python3 scripts/torch_gpu_bench.py --amp off,bf16,tf32 > $W/torch.jsonl"
  pack
fi

if want energy; then
  run energy 150 python3 scripts/gpu_energy.py ./gpu-bin/tune "$W/energy"
  pack
fi

if want fidelity; then
  # A step here is a few milliseconds: 150 of them per measurement, so the median
  # rests on more than launch jitter (30 steps left amp_bf16 at 0.71x in one round and
  # 1.08x in the next on the first session's H200).
  run fidelity 200 python3 scripts/fidelity.py ./gpu-bin/tune python3 --device cuda --rounds 3 \
    --steps 150 --workloads cnn,mlp --knobs "${FIDELITY_KNOBS:-amp_bf16,tf32,zero_grad,checkpoint,batch_x2,autotune}" \
    --json "$W/fidelity.jsonl"
  pack
fi

if want sweep; then
  sed -e 's/^name = "seed-knobs"/name = "seed-knobs-cuda"/' \
      -e 's/^amp = \["off", "bf16", "fp16"\]/amp = ["off", "bf16", "fp16", "tf32"]/' \
      experiments/seed-knobs.toml > "$W/seed-knobs-cuda.toml"
  run sweep 300 ./gpu-bin/tune sweep "$W/seed-knobs-cuda.toml" --device cuda --out "$W/sweep"
  pack
fi
note "session: $(( $(date +%s) - START ))s of a ${BUDGET}s budget"
pack
cat "$W/summary.txt"
