#!/usr/bin/env bash
# Side-by-side engine benchmark: tune vs PyTorch CPU (../shared/peers/torch_bench.py)
# and the GEMM ceiling (numpy/OpenBLAS, torch/MKL), in one run on this machine.
# Usage: scripts/bench-vs-torch.sh [PYTHON]   (PYTHON: an interpreter with torch+numpy)
# Output: JSON lines on stdout (one per measurement), suitable for docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-/tmp/peers-venv/bin/python}
peers=../shared/peers
cargo build --release -q
for t in 1 2; do
  for w in mlp cnn; do
    ./target/release/tune bench --what "$w" --threads "$t" --json
    "$py" "$peers/torch_bench.py" --workloads "$w" --threads "$t" --knobs baseline
  done
  ./target/release/tune bench --what gemm --threads "$t" --json
done
"$py" "$peers/gemm_bench.py"
