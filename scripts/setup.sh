#!/usr/bin/env bash
# Installs what building and testing heterps needs, when it is missing:
# a C compiler and OpenBLAS (Debian packages) and the Go modules. Idempotent
# and quiet when everything is already there.
set -euo pipefail

need_pkgs=()
command -v gcc >/dev/null || need_pkgs+=(gcc)
dpkg -s libopenblas-dev >/dev/null 2>&1 || need_pkgs+=(libopenblas-dev)
dpkg -s pkg-config >/dev/null 2>&1 || need_pkgs+=(pkg-config)

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
