#!/usr/bin/env bash
# make bench: runs every benchmark and records its output in bench/results/.
# Each benchmark prints our figure beside the competitor's from the same run.
# Usage: bench/run.sh [name...]   (names: kernels ctr sched dist; default all)
set -euo pipefail
cd "$(dirname "$0")/.."
results=bench/results
mkdir -p "$results"
names=("$@")
((${#names[@]})) || names=(kernels ctr sched dist)

# PyTorch is a benchmark-only dependency, kept in its own virtual env.
torch_env() {
  local venv=bench/.venv
  if ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
    echo "bench: installing PyTorch (CPU benchmark only) into $venv" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q --upgrade pip >&2
    "$venv/bin/pip" install -q "torch==2.15.0" numpy >&2
  fi
  echo "$venv/bin/python"
}

run() { # name, command...
  local name=$1; shift
  echo "== $name: $*"
  "$@" 2>&1 | tee "$results/$name.txt"
}

for n in "${names[@]}"; do
  case "$n" in
    kernels) run kernels go run ./bench/kernels ;;
    ctr)
      py=$(torch_env)
      run pytorch go run ./bench/pytorch -python "$py" ;;
    sched) run sched go run ./bench/sched ;;
    dist) run dist bash -c 'go run ./bench/dist/wirebw && echo &&
      go test ./daemon/ps -run "^$" -bench PushPull -benchtime 500x && echo &&
      go run ./bench/dist/run --batches 512,2048 && echo &&
      go run ./bench/dist/run --batches 512,2048 --unit cpu-2t --nodes 1' ;;
    *) echo "bench: unknown benchmark $n" >&2; exit 2 ;;
  esac
done
