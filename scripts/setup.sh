#!/usr/bin/env bash
# Installs what building and testing heterps needs, when it is missing:
# a C compiler, OpenBLAS and systemd-analyze (Debian packages), the Go modules, and the
# Python packages safetensors and numpy that the checkpoint tests use to
# cross-check our files with the reference implementation. Idempotent and
# quiet when everything is already there.
set -euo pipefail

need_pkgs=()
command -v gcc >/dev/null || need_pkgs+=(gcc)
dpkg -s libopenblas-dev >/dev/null 2>&1 || need_pkgs+=(libopenblas-dev)
dpkg -s pkg-config >/dev/null 2>&1 || need_pkgs+=(pkg-config)
# systemd-analyze verifies the units in config/systemd (the test skips
# without it); the package is small where systemd is not already there.
command -v systemd-analyze >/dev/null || need_pkgs+=(systemd)

if ((${#need_pkgs[@]})); then
  echo "setup: installing ${need_pkgs[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
  echo "setup: Go 1.26 or newer is required (https://go.dev/dl)" >&2
  exit 1
fi
go mod download

if command -v python3 >/dev/null && ! python3 -c 'import safetensors.numpy, numpy' 2>/dev/null; then
  echo "setup: installing the Python packages safetensors and numpy (checkpoint format cross-check)"
  python3 -m pip install -q --root-user-action=ignore safetensors numpy
fi
