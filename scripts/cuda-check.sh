#!/usr/bin/env bash
# cuda-check: proves, on a machine without a GPU, that heterps' CUDA build is
# not broken. One line per step:
#   1. toolkit  — uses $CUDA_HOME, an nvcc on PATH or /usr/local/cuda; else
#                 installs CUDA 13.0 from PyPI wheels into a user cache (once;
#                 later runs find it and say so).
#   2. kernels  — compiles every kernels/cuda/*.cu for sm_80 and sm_90 (make:
#                 unchanged sources are not recompiled) into libheterps_cuda.a.
#   3. go vet   — vets the cuda-tagged Go packages against those headers, and
#                 again against CUDA 12's headers (the Go side must build with
#                 either toolkit; the wheel is small).
#   4. go test  — links the cuda-tagged test binaries (cudart is linked
#                 statically; libcuda and libcublas are opened at run time, so
#                 no driver is needed to link or start) and runs the CUDA
#                 tests: without a GPU each one must skip, saying why.
# Needs no GPU and no libcuda.so. Environment: CUDA_HOME (a toolkit),
# HETERPS_CUDA_CACHE (where the wheels go), HETERPS_CUDA_WHEELS=1 (use the
# wheels even when a toolkit is installed).
#
# cuda-check.sh --build DIR (make build-cuda) does steps 1 and 2, then
# builds heterps and heterpsd with -tags cuda into DIR instead of vetting
# and testing.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=""
if [[ ${1:-} == --build ]]; then
  [[ -n ${2:-} ]] || { echo "usage: $0 [--build DIR]" >&2; exit 2; }
  OUT_DIR=$2
fi

# Pinned wheel set: CUDA 13.0 (the toolkit and driver of the project's GPU
# machines). The cu12 nvcc wheels carry ptxas and libnvvm but no nvcc
# executable, so CUDA 12 is used for headers only.
WHEELS=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85)
CUBLAS_WHEEL=nvidia-cublas==13.0.2.14 # 420 MB: only its headers are kept
CU12_WHEELS=(nvidia-cuda-runtime-cu12==12.8.90 nvidia-cuda-nvcc-cu12==12.8.93
  nvidia-cuda-cccl-cu12==12.8.90) # headers only

CACHE=${HETERPS_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/heterps/cuda-13.0}
BUILD=kernels/cuda/build
t0=$SECONDS

say() { printf 'cuda-check: %-8s %s\n' "$1" "$2"; }
fail() {
  say "$1" "FAILED: $2" >&2
  exit 1
}
elapsed() { echo "$((SECONDS - t0))s"; }

install_wheels() {
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  rm -rf "$CACHE" && mkdir -p "$CACHE"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$CACHE" \
    "${WHEELS[@]}" >"$tmp/log" 2>&1 || {
    cat "$tmp/log" >&2
    return 1
  }
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$CACHE/cu12" \
    "${CU12_WHEELS[@]}" >"$tmp/log" 2>&1 || {
    cat "$tmp/log" >&2
    return 1
  }
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" \
    "$CUBLAS_WHEEL" >"$tmp/log" 2>&1 || {
    cat "$tmp/log" >&2
    return 1
  }
  unzip -q -o "$tmp"/nvidia_cublas-*.whl 'nvidia/cu13/include/*' -d "$CACHE"
  printf '%s\n' "${WHEELS[@]}" "$CUBLAS_WHEEL" "${CU12_WHEELS[@]}" >"$CACHE/.complete"
}

# ---- 1. toolkit ----------------------------------------------------------------
CU12_INC=""
if [[ ${HETERPS_CUDA_WHEELS:-0} != 1 && -n ${CUDA_HOME:-} && -x ${CUDA_HOME:-}/bin/nvcc ]]; then
  ROOT=$CUDA_HOME
elif [[ ${HETERPS_CUDA_WHEELS:-0} != 1 ]] && command -v nvcc >/dev/null; then
  ROOT=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
elif [[ ${HETERPS_CUDA_WHEELS:-0} != 1 && -x /usr/local/cuda/bin/nvcc ]]; then
  ROOT=/usr/local/cuda
else
  want=$(printf '%s\n' "${WHEELS[@]}" "$CUBLAS_WHEEL" "${CU12_WHEELS[@]}")
  if [[ ! -f $CACHE/.complete || $(cat "$CACHE/.complete") != "$want" ]]; then
    say toolkit "installing CUDA 13.0 wheels into $CACHE ..."
    install_wheels || fail toolkit "pip could not install the CUDA wheels"
  fi
  ROOT=$CACHE/nvidia/cu13
  CU12_INC="-I$CACHE/cu12/nvidia/cuda_runtime/include -I$CACHE/cu12/nvidia/cuda_nvcc/include"
fi
NVCC=$ROOT/bin/nvcc
INC=$ROOT/include
LIB=$ROOT/lib
[[ -d $ROOT/lib64 ]] && LIB=$ROOT/lib64
[[ -x $NVCC ]] || fail toolkit "no nvcc at $NVCC"
[[ -f $INC/cublas_v2.h ]] || fail toolkit "no cublas_v2.h in $INC"
[[ -f $LIB/libcudart_static.a ]] || fail toolkit "no libcudart_static.a in $LIB"
ver=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
say toolkit "nvcc $ver at $ROOT ($(elapsed))"

# ---- 2. kernels -------------------------------------------------------------------
t0=$SECONDS
nsrc=$(ls kernels/cuda/*.cu | wc -l)
incs="-I$INC"
[[ -d $INC/cccl ]] && incs+=" -isystem $INC/cccl"
out=$(make -s -C kernels/cuda -j"$(nproc)" CUDA_HOME="$ROOT" NVCC="$NVCC" BUILD=build \
  CUDA_INCLUDES="$incs" WERROR="-Werror all-warnings" 2>&1) ||
  {
    echo "$out" >&2
    fail kernels "nvcc failed"
  }
[[ -z $out ]] || echo "$out"
cub_note=""
if [[ -n $CU12_INC ]]; then
  # CUB is the one library whose API moved between CUDA 12 and 13: compile its
  # user against CUDA 12.8's CCCL (2.7) as well (when embbag.cu changed).
  obj=$BUILD/embbag-cccl2.o
  if [[ ! $obj -nt kernels/cuda/embbag.cu || ! $obj -nt kernels/cuda/common.cuh ]]; then
    "$NVCC" -O3 -std=c++17 -I kernels -isystem "$CACHE/cu12/nvidia/cuda_cccl/include" -I"$INC" \
      -gencode arch=compute_90,code=sm_90 -Werror all-warnings -c kernels/cuda/embbag.cu -o "$obj" ||
      fail kernels "embbag.cu does not compile against CUDA 12.8's CUB"
  fi
  cub_note=", embbag.cu also against CUDA 12.8's CUB"
fi
say kernels "$nsrc .cu files for sm_80+sm_90 -> $BUILD/libheterps_cuda.a$cub_note ($(elapsed))"

# Go does not hash libraries named in #cgo LDFLAGS; naming the library's hash in
# CGO_LDFLAGS (an -L to a directory that need not exist) makes a rebuilt
# library relink the binaries.
libsum=$(sha256sum "$BUILD/libheterps_cuda.a" | cut -c1-16)
export CGO_ENABLED=1
export CGO_CFLAGS="-I$INC"
export CGO_LDFLAGS="-L$LIB -L$BUILD/.lib-$libsum"

# ---- --build: the cuda-tagged binaries ---------------------------------------------
if [[ -n $OUT_DIR ]]; then
  t0=$SECONDS
  mkdir -p "$OUT_DIR"
  go build -tags cuda -o "$OUT_DIR/" ./tools/heterps ./daemon/cmd/heterpsd || fail build "go build -tags cuda"
  say build "heterps and heterpsd with -tags cuda (CUDA $ver) -> $OUT_DIR/ ($(elapsed))"
  exit 0
fi

# ---- 3. go vet ----------------------------------------------------------------------
t0=$SECONDS
pkgs=(./native/ ./native/cudadrv/ ./daemon/node/ ./bench/gpu/ctr/)
# The commands too: their cuda-tagged files (heterps train/profile on a GPU)
# compile only here.
vet_pkgs=("${pkgs[@]}" ./tools/heterps/ ./daemon/cmd/heterpsd/)
go vet -tags cuda "${vet_pkgs[@]}" || fail "go vet" "go vet -tags cuda (CUDA $ver headers)"
vetted="CUDA $ver"
if [[ -n $CU12_INC ]]; then
  CGO_CFLAGS="$CU12_INC" go vet -tags cuda "${vet_pkgs[@]}" ||
    fail "go vet" "go vet -tags cuda (CUDA 12 headers)"
  vetted+=" and CUDA 12.8"
fi
say "go vet" "-tags cuda ${vet_pkgs[*]} against $vetted headers ($(elapsed))"

# ---- 4. go test (link + skip) -------------------------------------------------------------
# Twice: as this machine is (no driver: libcuda.so.1 is missing), and with a
# stand-in libcuda.so.1 whose every call fails with CUDA_ERROR_NO_DEVICE (a
# driver without a GPU). On a machine with a GPU the tests run for real.
t0=$SECONDS
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
gcc -shared -fPIC -O1 -o "$log/libcuda.so.1" kernels/cuda/testdata/nodevice_libcuda.c
summary=()
for mode in as-is nodevice; do
  env=()
  [[ $mode == nodevice ]] && env=(LD_LIBRARY_PATH="$log${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  if ! env "${env[@]}" go test -tags cuda -count=1 -v -run 'CUDA|Driver' "${pkgs[@]}" >"$log/$mode" 2>&1; then
    cat "$log/$mode" >&2
    fail "go test" "cuda-tagged tests failed ($mode)"
  fi
  ran=$(grep -c '^=== RUN' "$log/$mode" || true)
  passed=$(grep -c -- '--- PASS' "$log/$mode" || true)
  skipped=$(grep -c -- '--- SKIP' "$log/$mode" || true)
  why=$(grep -m1 -B1 -- '--- SKIP' "$log/$mode" | head -n1 | sed 's/^ *[a-z_]*\.go:[0-9]*: //' || true)
  line="$mode: $ran tests, $passed passed, $skipped skipped"
  [[ $skipped -gt 0 ]] && line+=" ($why)"
  # The stand-in must reach "driver loaded, no device"; a driver entry point
  # it lacks would make it test the no-driver path again.
  if [[ $mode == nodevice && $skipped -gt 0 && $why != *CUDA_ERROR_NO_DEVICE* ]]; then
    fail "go test" "the stand-in libcuda did not report CUDA_ERROR_NO_DEVICE (add the missing entry point to kernels/cuda/testdata/nodevice_libcuda.c): $why"
  fi
  summary+=("$line")
  [[ $mode == as-is && $skipped -eq 0 ]] && break # a real GPU: no need for the stand-in
done
say "go test" "linked and ran ($(elapsed))"
for line in "${summary[@]}"; do say "" "  $line"; done
