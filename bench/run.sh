#!/usr/bin/env bash
# make bench: runs every benchmark and records its output in bench/results/.
# Each benchmark prints our figure beside the competitor's from the same run.
# Usage: bench/run.sh [name...]   (names: kernels ctr sched dist profile paddle place datastart; default all)
set -euo pipefail
cd "$(dirname "$0")/.."
results=bench/results
mkdir -p "$results"
names=("$@")
((${#names[@]})) || names=(kernels ctr sched dist profile paddle place datastart)

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

# Each program prints its own header (date, machine, load average and host
# speed before and after — the speed is one thread of sgemm, which drops
# when other tenants share the cores —, versions) and writes its results
# file whole with --out.
# PaddlePaddle likewise, in two envs: the current release for single-process
# training, and 2.6.2 for its parameter-server mode (fleet's async mode; its
# generated protobuf code wants protobuf < 5). A failed install is not fatal:
# bench/paddle records why in its results file.
paddle_env() { # venv, requirement...
  local venv=$1; shift
  if ! "$venv/bin/python" -c 'import paddle' >/dev/null 2>&1; then
    echo "bench: installing PaddlePaddle $1 (CPU benchmark only) into $venv" >&2
    { python3 -m venv "$venv" && "$venv/bin/pip" install -q --upgrade pip &&
      "$venv/bin/pip" install -q "$@" numpy; } >&2 || echo "bench: installing $* into $venv failed" >&2
  fi
  echo "$venv/bin/python"
}

run() { # name, command...
  local name=$1; shift
  echo "== $name: $*"
  "$@" --out "$results/$name.txt"
}

for n in "${names[@]}"; do
  case "$n" in
    kernels) run kernels go run ./bench/kernels ;;
    place) run place go run ./bench/place ;;
    datastart) run datastart go run ./bench/datastart ;;
    ctr)
      py=$(torch_env)
      run pytorch go run ./bench/pytorch -python "$py" ;;
    sched) run sched go run ./bench/sched ;;
    profile) run profile go run ./bench/profile ;;
    dist) run dist go run ./bench/dist/run --wire --batches 512,2048 --dense-sync ps,allreduce --also cpu-2t:1 ;;
    paddle)
      py=$(paddle_env bench/.venv-paddle "paddlepaddle==3.3.1")
      pyps=$(paddle_env bench/.venv-paddle-ps "paddlepaddle==2.6.2" "protobuf<5")
      run paddle go run ./bench/paddle -python "$py" -python-ps "$pyps" ;;
    *) echo "bench: unknown benchmark $n" >&2; exit 2 ;;
  esac
done
