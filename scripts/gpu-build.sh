#!/usr/bin/env bash
# Builds what scripts/gpu-session.sh runs on the GPU machine (which has no registry access
# and may have no Rust): gpu-bin/ with tune and the GPU test binaries, stripped, and the
# path they were built in (the tests carry it: CARGO_MANIFEST_DIR, CARGO_BIN_EXE_tune).
# Carry gpu-bin with the call: `carry: ["gpu-bin"]` (64 MiB in all).
set -euo pipefail
T="cuda_kernels gpu_optim gpu_amp gpu_autotune gpu_cudnn gpu_cudnn_standin gpu_parity gpu_ddp knobs"
cargo build --release
# shellcheck disable=SC2046 # one --test flag per name
cargo test --release --no-run $(for t in $T; do printf -- '--test %s ' "$t"; done)
rm -rf gpu-bin && mkdir -p gpu-bin
cp target/release/tune gpu-bin/
for t in $T; do
  cp "$(ls -t target/release/deps/"$t"-* | grep -v '\.d$' | head -1)" "gpu-bin/$t"
done
strip gpu-bin/*
pwd > gpu-bin/manifest_dir
du -sh gpu-bin
