#!/usr/bin/env bash
# bench/gpu/run.sh OUTDIR — the GPU check of heterps, in one go (about 90 s
# on an H200): runs the GPU parity tests, the per-op GPU benchmarks, an FC
# layer against its cuBLAS calls, ctrdnn training against PyTorch, and the
# CLI on the GPU, and writes to OUTDIR:
#   gpu.txt      the recording: a header (commit, GPU, driver, toolkit, CPU,
#                load before and after, PyTorch) and every figure below
#   device.txt   nvidia-smi, driver and toolkit versions
#   build.txt    how the binaries were built
#   tests.txt    go test -v output of the CUDA tests (native, native/cudadrv)
#   bench.txt    raw benchmark output
#   summary.txt  one line per op: GB/s and the fraction of this run's
#                device-to-device copy, or TFLOP/s and the fraction of this
#                run's cuBLAS SGEMM 4096^3; the FC layer against its GEMMs
#                (fc.txt); ctrdnn samples/s against PyTorch on the same GPU
#                at batch 512 and 2048 (ctr.txt, ctr_torch-N.json); the
#                plan on a profile measured here (profile-gpu.toml,
#                profile.toml, plan-measured.json); a 2-stage job (CPU
#                embedding + GPU FC, run-heuristic-*.json) against
#                single-process CPU training on 8 and 16 threads and the
#                whole model on the GPU (train-*.json); two node daemons
#                naming GPU 0, the second refused by UUID (uuid-check/);
#                cli.txt has the CLI's standard error
#
# The machine needs an NVIDIA driver, a CUDA toolkit (CUDA_HOME, nvcc on
# PATH, or /usr/local/cuda) and cuBLAS. It runs the binaries that
# `bench/gpu/run.sh --prepare` built beforehand into bench/gpu/prebuilt/
# (ignored by git; carry it there) when they are there, else builds with
# Go and nvcc on the machine.
#
#   bench/gpu/run.sh --prepare   build bench/gpu/prebuilt/ here (OpenBLAS
#                                linked statically, for machines that lack
#                                it) and pack it into bench/gpu/prebuilt.txz,
#                                the one file to carry; run.sh unpacks it
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PREBUILT=bench/gpu/prebuilt

die() {
  echo "run.sh: $*" >&2
  exit 1
}

find_toolkit() {
  if [[ -n ${CUDA_HOME:-} && -x $CUDA_HOME/bin/nvcc ]]; then
    echo "$CUDA_HOME"
  elif command -v nvcc >/dev/null; then
    dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then
    echo /usr/local/cuda
  fi
}

# build_tests DIR EXTRA_LDFLAGS: the kernels library, then the two test
# binaries, into DIR.
build_tests() {
  local dir=$1 extra=$2 cuda lib
  cuda=$(find_toolkit)
  [[ -n $cuda ]] || {
    echo "no CUDA toolkit (set CUDA_HOME)"
    return 1
  }
  lib=$cuda/lib64
  [[ -d $lib ]] || lib=$cuda/lib
  local incs="-I$cuda/include"
  [[ -d $cuda/include/cccl ]] && incs+=" -isystem $cuda/include/cccl"
  make -s -C kernels/cuda -j"$(nproc)" CUDA_HOME="$cuda" NVCC="$cuda/bin/nvcc" CUDA_INCLUDES="$incs" ||
    return 1
  local sum
  sum=$(sha256sum kernels/cuda/build/libheterps_cuda.a | cut -c1-16)
  mkdir -p "$dir"
  export CGO_ENABLED=1 CGO_CFLAGS="-I$cuda/include"
  export CGO_LDFLAGS="$extra -L$lib -L$ROOT/kernels/cuda/build/.lib-$sum"
  # No symbol tables: the binaries travel to the GPU machine, whose copy
  # limit they must fit under (packed, see --prepare).
  local ld=(-ldflags "-s -w")
  go test -tags cuda "${ld[@]}" -c -o "$dir/native.test" ./native/ || return 1
  go test -tags cuda "${ld[@]}" -c -o "$dir/cudadrv.test" ./native/cudadrv/ || return 1
  go test -tags cuda "${ld[@]}" -c -o "$dir/ctr.test" ./bench/gpu/ctr/ || return 1
  go build -tags cuda "${ld[@]}" -o "$dir/" ./tools/heterps ./daemon/cmd/heterpsd || return 1
  echo "built with $("$cuda/bin/nvcc" --version | tail -n1), $(go version), CGO_LDFLAGS=$CGO_LDFLAGS"
}

# commit_of prints the commit the binaries are built from, "+dirty" when the
# tree has changes (a recording must come from a clean one).
commit_of() {
  local c
  c=$(git rev-parse --short=7 HEAD 2>/dev/null) || {
    echo unknown
    return
  }
  [[ -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || c+="+dirty"
  echo "$c"
}

if [[ ${1:-} == --prepare ]]; then
  # The wheel toolkit that cuda-check installs, unless a real one is here.
  if [[ -z $(find_toolkit) ]]; then
    ./scripts/cuda-check.sh >/dev/null || die "cuda-check failed"
    export CUDA_HOME=${HETERPS_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/heterps/cuda-13.0}/nvidia/cu13
  fi
  static=$(mktemp -d)
  trap 'rm -rf "$static"' EXIT
  blas=$(find /usr/lib /usr/lib64 -name libopenblas.a 2>/dev/null | head -n1)
  extra=""
  if [[ -n $blas ]]; then
    ln -s "$blas" "$static/libopenblas.a" # first on the search path: the static one wins
    extra="-L$static -static-libgcc"
  fi
  mkdir -p "$PREBUILT"
  build_tests "$PREBUILT" "$extra" >"$PREBUILT/build.txt" 2>&1 || {
    cat "$PREBUILT/build.txt"
    die "build failed"
  }
  commit_of >"$PREBUILT/commit"
  # One packed file to carry: the binaries unpacked are over the device
  # tool's 64 MiB copy limit.
  tar -cf - -C bench/gpu prebuilt | xz -T0 -6 >"$PREBUILT.txz"
  ls -la "$PREBUILT" "$PREBUILT.txz"
  exit 0
fi

OUT=${1:-}
[[ -n $OUT ]] || die "usage: bench/gpu/run.sh OUTDIR | --prepare"
mkdir -p "$OUT"
t0=$SECONDS
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
step() { echo "run.sh: [$((SECONDS - t0))s] $*"; }

# ---- device -------------------------------------------------------------------
{
  nvidia-smi 2>&1 || echo "nvidia-smi failed"
  echo
  cuda=$(find_toolkit)
  [[ -n $cuda ]] && "$cuda/bin/nvcc" --version | tail -n2
} >"$OUT/device.txt"
step "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n1)"

# ---- build ----------------------------------------------------------------------
BIN=$ROOT/bench/gpu/.bin
if [[ ! -x $PREBUILT/native.test && -f $PREBUILT.txz ]]; then
  xz -dc "$PREBUILT.txz" | tar -xf - -C bench/gpu || die "unpacking $PREBUILT.txz failed"
fi
if [[ -x $PREBUILT/native.test ]]; then
  step "using $PREBUILT (built by run.sh --prepare at $(cat "$PREBUILT/commit" 2>/dev/null))"
  BIN=$ROOT/$PREBUILT
  cp "$PREBUILT/build.txt" "$OUT/build.txt" 2>/dev/null || echo "prebuilt" >"$OUT/build.txt"
elif command -v go >/dev/null && [[ -n $(find_toolkit) ]]; then
  step "building with Go and nvcc"
  build_tests "$BIN" "" >"$OUT/build.txt" 2>&1 || {
    tail -n 30 "$OUT/build.txt"
    die "build failed (see $OUT/build.txt)"
  }
else
  die "neither Go and a CUDA toolkit nor $PREBUILT/native.test: run bench/gpu/run.sh --prepare first"
fi

# cuBLAS is opened at run time: point at the one that matches the toolkit.
if [[ -z ${HETERPS_CUBLAS:-} ]]; then
  for d in "$(find_toolkit)/lib64" "$(find_toolkit)/lib" /usr/local/cuda/lib64 \
    $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    f=$(find "$d" -maxdepth 4 -name 'libcublas.so.1[0-9]' 2>/dev/null | sort -r | head -n1)
    if [[ -n $f ]]; then
      export HETERPS_CUBLAS=$f
      export LD_LIBRARY_PATH="$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      break
    fi
  done
fi
step "cuBLAS: ${HETERPS_CUBLAS:-default search path}"
echo "HETERPS_CUBLAS=${HETERPS_CUBLAS:-}" >>"$OUT/build.txt"

# ---- GPU parity tests --------------------------------------------------------------
step "GPU tests"
status=0
{
  (cd native && timeout 120 "$BIN/native.test" -test.run 'CUDA' -test.v -test.count=1) || status=1
  (cd native/cudadrv && timeout 30 "$BIN/cudadrv.test" -test.v -test.count=1) || status=1
} >"$OUT/tests.txt" 2>&1
grep -E '^(--- (PASS|FAIL|SKIP)|ok|FAIL|PASS)' "$OUT/tests.txt" | grep -v -- '--- PASS' | head -n 40
step "tests: $(grep -c -- '--- PASS' "$OUT/tests.txt") passed, $(grep -c -- '--- FAIL' "$OUT/tests.txt") failed, $(grep -c -- '--- SKIP' "$OUT/tests.txt") skipped"

# ---- per-op benchmarks -------------------------------------------------------------------
step "benchmarks"
(cd native && timeout 120 "$BIN/native.test" -test.run '^$' -test.bench 'CUDA' -test.benchtime 200x \
  -test.count=1) >"$OUT/bench.txt" 2>&1 || status=1
awk '
  /^Benchmark/ {
    name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkCUDA/, "", name)
    for (i = 3; i < NF; i++) {
      if ($(i+1) == "GB/s") gbs[name] = $i
      if ($(i+1) == "TFLOP/s") tf[name] = $i
    }
    order[++n] = name
  }
  END {
    copy = gbs["Copy"]; gemm = tf["Gemm/4096x4096x4096/tf32=false"]
    printf "%-44s %12s %10s\n", "op", "figure", "of ceiling"
    for (i = 1; i <= n; i++) {
      k = order[i]
      if (k in tf)
        printf "%-44s %8.1f TF/s %9.2fx (cuBLAS SGEMM 4096^3: %.1f TF/s)\n", k, tf[k], gemm ? tf[k]/gemm : 0, gemm
      else if (k in gbs)
        printf "%-44s %7.0f GB/s %9.2fx (device-to-device copy: %.0f GB/s)\n", k, gbs[k], copy ? gbs[k]/copy : 0, copy
    }
  }' "$OUT/bench.txt" >"$OUT/summary.txt"
cat "$OUT/summary.txt"

# ---- ctrdnn training against PyTorch on this GPU ------------------------------------------
# Same model, batch 512 and batches (written by ctr.test for PyTorch); target >= 1.5x.
step "ctrdnn training: heterps vs PyTorch on this GPU"
: >"$OUT/ctr.txt"
for batch in 512 2048; do
  CTR=$OUT/ctrdata
  mkdir -p "$CTR"
  (cd bench/gpu/ctr && HETERPS_CTR_OUT=$CTR HETERPS_CTR_BATCH=$batch timeout 90 "$BIN/ctr.test" -test.run CTRDNN \
    -test.v -test.count=1) >>"$OUT/ctr.txt" 2>&1 || status=1
  ours=$(grep -o '"samples_per_s":[0-9.e+]*' "$OUT/ctr.txt" | tail -n1 | cut -d: -f2)
  timeout 90 python3 bench/pytorch/ctrdnn.py --device cuda --data "$CTR" --steps 200 >"$OUT/ctr_torch-$batch.json" \
    2>>"$OUT/ctr.txt" || status=1
  theirs=$(grep -o '"samples_per_s": [0-9.e+]*' "$OUT/ctr_torch-$batch.json" | head -n1 | cut -d: -f2)
  rm -rf "$CTR"
  line=$(awk -v n="$batch" -v a="${ours:-0}" -v b="${theirs:-0}" 'BEGIN {
    printf "ctrdnn training, batch %d: heterps %.0f samples/s, PyTorch %.0f samples/s, ratio %.2fx (target >= 1.5x)", n, a, b, (b > 0 ? a / b : 0) }')
  step "$line"
  echo "$line" >>"$OUT/summary.txt"
done

# ---- an FC layer against its own cuBLAS calls ------------------------------------------------
# nn.FC forward+backward (GEMM, bias+ReLU, fused backward, two GEMMs) against
# the three GEMMs alone, at ctrdnn's shapes; target <= 1.15x.
step "FC layer vs its cuBLAS calls"
(cd bench/gpu/ctr && timeout 60 "$BIN/ctr.test" -test.run FCLayerAgainstCuBLAS -test.v -test.count=1) \
  >"$OUT/fc.txt" 2>&1 || status=1
grep -E '"(fc|probe)"' "$OUT/fc.txt" | awk -F'[:,}]' '{
  delete v
  for (i = 1; i < NF; i++) { k = $i; gsub(/[" {]/, "", k); v[k] = $(i+1) }
  if ("probe" in v)
    printf "one queued call, GPU idle: kernel launch (fill 1 float) %.1f us, cuBLAS SGEMM 8x8x8 %.1f us\n", v["fill_1_float_us"], v["gemm_8x8x8_us"]
  else {
    gsub(/"/, "", v["fc"])
    printf "FC layer %-14s fwd+bwd %7.1f us, its 3 cuBLAS GEMMs %7.1f us, ratio %.2fx (target <= 1.15x); bias+ReLU %.1f us, its backward %.1f us\n", v["fc"], v["layer_us"], v["cublas_us"], v["ratio"], v["bias_act_us"], v["bias_act_bwd_us"]
  }
}' | tee -a "$OUT/summary.txt"

# ---- the CLI on the GPU: profile, then a CPU-embedding + GPU-FC pipeline --------------------
# One catalog: this machine's cores as type cpu-4t (a unit is a worker of
# four threads, two units), its GPU as type h200. The heuristic method puts
# the embedding layer on the CPU and the FC layers on the GPU: two stages,
# two node daemons, the PS shard on the CPU node. The all-CPU reference is
# single-process training on the same eight cores and on all of them: no
# pipeline, wire or PS costs, so no all-CPU plan on this machine does
# better. Target: the pipeline is faster.
step "heterps profile --device cuda, and a 2-stage job with its FC stage on the GPU"
cat >"$OUT/gpu-catalog.toml" <<'TOML'
version = 1
name = "gpu-check"
[[type]]
name = "cpu-4t"
kind = "cpu"
model = "four of this machine's cores a unit"
price = 0.16
max_units = 2
peak_flops = 4.0e11
mem_bandwidth = 4.0e10
link_bandwidth = 5.0e9
[[type]]
name = "h200"
kind = "gpu"
model = "H200"
price = 4.0
max_units = 1
peak_flops = 6.0e13
mem_bandwidth = 4.8e12
link_bandwidth = 5.0e9
[[node]]
name = "local"
address = "127.0.0.1:7071"
units = { cpu-4t = 2, h200 = 1 }
TOML
# --units 1,2 with sync steps: the whole stage trained as k replicas, one GPU
# each (a second GPU, where the machine has one, fits alpha), its
# synchronisation folded into the GPU type's oct.
timeout 120 "$BIN/heterps" profile --model ctrdnn --catalog "$OUT/gpu-catalog.toml" --type h200 --device cuda \
  --units 1,2 --sync-steps 20 --batch 512 --out "$OUT/profile-gpu.toml" >"$OUT/cli.txt" 2>&1 || status=1
# The CPU type measured into the same profile, then the plan on both
# measured types: its sources say so.
timeout 90 "$BIN/heterps" profile --model ctrdnn --catalog "$OUT/gpu-catalog.toml" --type cpu-4t --unit-threads 4 \
  --units 1,2 --sync-steps 0 --batch 512 --into "$OUT/profile-gpu.toml" --out "$OUT/profile.toml" >>"$OUT/cli.txt" 2>&1 ||
  status=1
timeout 30 "$BIN/heterps" plan --problem "$OUT/profile.toml" --method exact --json >"$OUT/plan-measured.json" \
  2>>"$OUT/cli.txt" || status=1
echo "heterps plan --method exact on the measured profile (both types): $(tr -d ' \n' <"$OUT/plan-measured.json" |
  grep -o '"cost":[0-9.e+-]*\|"throughput":[0-9.e+]*\|"assign":\[[^]]*\]' | head -n3 | tr '\n' ' ')" \
  >>"$OUT/summary.txt"
samples() { grep -o '"samples_per_s": *[0-9.e+]*' "$1" 2>/dev/null | head -n1 | cut -d: -f2 | tr -d ' '; }
train() { # train NAME ARGS...: heterps train --json into $OUT/train-NAME.json
  local name=$1
  shift
  timeout 60 "$BIN/heterps" train --model ctrdnn --data synthetic --steps 300 --json "$@" \
    >"$OUT/train-$name.json" 2>>"$OUT/cli.txt" || status=1
}
train gpu --device cuda
train gpu-2048 --device cuda --batch 2048
train cpu8-2048 --device cpu --threads 8 --batch 2048
train cpu16-2048 --device cpu --threads 16 --batch 2048
# micro_batches: with one, the two stages take turns; with more, they overlap
# (1F1B). dense_sync: the GPU stage's dense parameters through the CPU node's
# PS every step, or kept on its replica (a ring of one).
best=0
for v in mb1-ps mb4-ps mb1-allreduce; do
  mb=${v%%-*}
  mb=${mb#mb}
  sync=${v#*-}
  sed -e "s/@MB@/$mb/" -e "s/@SYNC@/$sync/" -e "s/@V@/$v/" >"$OUT/job-heuristic-$v.toml" <<'TOML'
version = 1
name = "gpu-check-heuristic-@V@"
model = "ctrdnn"
data = "synthetic:1"
batch = 2048
steps = 300
throughput_limit = 0
method = "heuristic"
mode = "bsp"
micro_batches = @MB@
dense_sync = "@SYNC@"
seed = 1
TOML
  timeout 90 "$BIN/heterps" run "$OUT/job-heuristic-$v.toml" --catalog "$OUT/gpu-catalog.toml" \
    --heterpsd "$BIN/heterpsd" --json >"$OUT/run-heuristic-$v.json" 2>>"$OUT/cli.txt" || status=1
  logs=$(grep -o 'daemon logs in [^ ]*' "$OUT/cli.txt" | tail -n1 | cut -d' ' -f4)
  [[ -n $logs && -d $logs ]] && cp -r "$logs" "$OUT/logs-heuristic-$v"
  x=$(samples "$OUT/run-heuristic-$v.json")
  echo "ctrdnn job, batch 2048, CPU embedding (4 threads) + GPU FC, micro_batches $mb, dense_sync $sync: ${x:-0} samples/s" >>"$OUT/summary.txt"
  best=$(awk -v a="$best" -v b="${x:-0}" 'BEGIN { print (b > a ? b : a) }')
done
line=$(awk -v p="$best" -v c8="$(samples "$OUT/train-cpu8-2048.json")" \
  -v c16="$(samples "$OUT/train-cpu16-2048.json")" -v g="$(samples "$OUT/train-gpu-2048.json")" 'BEGIN {
  printf "ctrdnn, batch 2048: CPU embedding (4 threads) + GPU FC pipeline job, best of the above %.0f samples/s; all-CPU single process, 8 threads %.0f (%.2fx), 16 threads %.0f (%.2fx) (target > 1x); whole model on the GPU in one process %.0f",
    p, c8, (c8 > 0 ? p / c8 : 0), c16, (c16 > 0 ? p / c16 : 0), g }')
step "$line"
echo "$line" >>"$OUT/summary.txt"
echo "heterps train --device cuda, batch 512: $(samples "$OUT/train-gpu.json") samples/s" >>"$OUT/summary.txt"

# ---- one GPU, two daemons: the coordinator refuses the second ------------------------------
# Both node files name GPU 0; the coordinator tells them apart by the UUID
# the driver reports and refuses the second (409), naming both: two daemons
# on one GPU would each be billed for it.
step "two node daemons naming GPU 0: the second must be refused"
uuid_dir=$OUT/uuid-check
mkdir -p "$uuid_dir"
"$BIN/heterpsd" --role=coordinator --catalog "$OUT/gpu-catalog.toml" --listen 127.0.0.1:0 \
  --state-dir "$uuid_dir/state" >"$uuid_dir/coordinator.out" 2>"$uuid_dir/coordinator.log" &
coord_pid=$!
url=""
for _ in $(seq 100); do
  url=$(sed -n 's/^coordinator //p' "$uuid_dir/coordinator.out" | head -n1)
  [[ -n $url ]] && break
  sleep 0.1
done
for n in a b; do
  printf 'version = 1\nname = "uuid-%s"\ncoordinator = "%s"\nlisten = "127.0.0.1:0"\nps_listen = "127.0.0.1:0"\ntype = "h200"\nunits = 1\ngpus = [0]\nplain = true\nregister_timeout = "20s"\n' \
    "$n" "$url" >"$uuid_dir/$n.toml"
done
"$BIN/heterpsd" --role=node --config "$uuid_dir/a.toml" >"$uuid_dir/a.log" 2>&1 &
node_pid=$!
for _ in $(seq 100); do
  grep -q 'registered' "$uuid_dir/a.log" && break
  sleep 0.1
done
timeout 30 "$BIN/heterpsd" --role=node --config "$uuid_dir/b.toml" >"$uuid_dir/b.log" 2>&1
b_status=$?
kill "$node_pid" "$coord_pid" 2>/dev/null
wait "$node_pid" "$coord_pid" 2>/dev/null
if [[ $b_status -ne 0 ]] && grep -q 'which the live node uuid-a names as its GPU 0' "$uuid_dir/b.log"; then
  line="one GPU, two daemons: the second was refused by UUID ($(grep -o 'GPU-[0-9a-f-]*' "$uuid_dir/b.log" | head -n1)): met"
else
  line="one GPU, two daemons: the second was NOT refused by UUID (exit $b_status; see uuid-check/b.log): missed"
  status=1
fi
step "$line"
echo "$line" >>"$OUT/summary.txt"

# ---- gpu.txt: the header, then every figure above ------------------------------------------
commit=$(cat "$PREBUILT/commit" 2>/dev/null)
[[ $BIN == "$ROOT/$PREBUILT" && -n $commit ]] || commit=$(commit_of)
{
  echo "# bench/gpu/run.sh — heterps on one GPU: parity tests, per-op figures, FC vs cuBLAS, ctrdnn vs PyTorch, CPU+GPU pipeline"
  echo "# started:  $started (UTC)"
  echo "# commit:   $commit"
  echo "# gpu:      $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n1) (name, memory, driver)"
  echo "# toolkit:  $(cuda=$(find_toolkit); [[ -n $cuda ]] && "$cuda/bin/nvcc" --version | tail -n1)"
  echo "# cuBLAS:   ${HETERPS_CUBLAS:-default search path}"
  echo "# built:    $(grep '^built with' "$OUT/build.txt" | head -n1)"
  echo "# cpu:      $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) logical CPUs"
  echo "# load:     $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
  echo "# PyTorch:  $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo 'not installed')"
  echo
  echo "## GPU tests (native, native/cudadrv)"
  echo "$(grep -c -- '--- PASS' "$OUT/tests.txt") passed, $(grep -c -- '--- FAIL' "$OUT/tests.txt") failed, $(grep -c -- '--- SKIP' "$OUT/tests.txt") skipped"
  grep -E -- '--- (FAIL|SKIP)' "$OUT/tests.txt"
  echo
  echo "## Figures"
  cat "$OUT/summary.txt"
  echo
  echo "## Raw benchmark lines"
  grep '^Benchmark' "$OUT/bench.txt"
} >"$OUT/gpu.txt"

step "done; results in $OUT (gpu.txt is the recording)"
exit $status
