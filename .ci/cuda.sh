#!/usr/bin/env bash
# The CUDA part of CI (.ci/run calls it): on a clean clone, on a fresh
# Debian 12 machine, as root, without a GPU. Needs Debian's CUDA toolkit
# (nvidia-cuda-toolkit 11.8.89 from non-free: about 1.6 GB downloaded,
# 100 s), which .ci/deps.sh installs before any step; then:
#   - tests that kvaudit-cuda --help, version and info work without a GPU,
#   - regenerates internal/kernels/checksum.ptx (go generate) and fails if it changed,
#   - assembles it for sm_70 and sm_90 with ptxas,
#   - builds the kvaudit-cuda runner with -tags cuda and vets it,
#   - compiles the cuda test binaries (they run only on a GPU machine:
#     internal/kernels/gpucheck.sh),
#   - runs the kernel-model tests,
#   - checks that without a GPU the runner dies at start and
#     `kvaudit checksum --engine auto` falls back to the cpu engine with a
#     note while --engine cuda exits 3 (on a GPU machine it runs the device
#     tests instead).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
want_nvcc="release 11.8, V11.8.89"
started=$(date +%s)
step() { printf '\n==> %s (%ds)\n' "$*" "$(($(date +%s) - started))"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step "CUDA toolkit (Debian nvidia-cuda-toolkit, $want_nvcc; .ci/deps.sh installs it)"
if ! command -v nvcc >/dev/null || ! nvcc --version | grep -q "$want_nvcc"; then
  echo "nvcc $want_nvcc is missing: run .ci/deps.sh first (.ci/run does)" >&2
  exit 1
fi
nvcc --version | tail -2

step "kvaudit-cuda's runner without a GPU (--help, version, info)"
go test -count=1 -run TestRunnerWithoutGPU ./cmd/kvaudit-cuda/internal/start

step "internal/kernels/checksum.ptx is what checksum.cu generates (go generate ./internal/kernels/)"
go generate ./internal/kernels/
if ! git diff --exit-code -- internal/kernels/checksum.ptx || [ -n "$(git status --porcelain -- internal/kernels/checksum.ptx)" ]; then
  echo "internal/kernels/checksum.ptx differs from what gen_ptx.sh generates from checksum.cu: run go generate ./internal/kernels/ and commit it" >&2
  exit 1
fi

step "the PTX assembles for sm_70 and sm_90"
ptxas -arch=sm_70 internal/kernels/checksum.ptx -o "$tmp/k70.cubin"
ptxas -arch=sm_90 internal/kernels/checksum.ptx -o "$tmp/k90.cubin"

step "kvaudit-cuda builds with -tags cuda"
CGO_ENABLED=1 go build -tags cuda -o "$tmp/kvaudit-cuda" ./cmd/kvaudit-cuda

step "go vet -tags cuda"
CGO_ENABLED=1 go vet -tags cuda ./cmd/kvaudit-cuda/ ./internal/kernels/...

step "the cuda test binaries compile"
CGO_ENABLED=1 go test -c -tags cuda -o "$tmp/kvaudit-cuda.test" ./cmd/kvaudit-cuda
CGO_ENABLED=1 go test -c -tags cuda -o "$tmp/kernels.test" ./internal/kernels

step "kernel-model tests (with and without -tags cuda)"
go test -count=1 ./internal/kernels/...
CGO_ENABLED=1 go test -count=1 -tags cuda ./internal/kernels/...

go build -o "$tmp/kvaudit" ./cmd/kvaudit
mkdir "$tmp/w"
cd "$tmp/w"
"$tmp/kvaudit" synth --out s --preset llama --tp 2 >/dev/null 2>&1
if "$tmp/kvaudit-cuda" info >"$tmp/info" 2>&1; then
  step "a GPU is here: the device tests"
  cat "$tmp/info"
  "$tmp/kvaudit-cuda.test" -test.count=1
  KVAUDIT_CUDA_RUNNER="$tmp/kvaudit-cuda" KVAUDIT_REQUIRE_GPU=1 "$tmp/kernels.test" -test.run GPU -test.count=1
else
  step "no GPU: the runner dies at start; --engine auto falls back, --engine cuda exits 3"
  echo "kvaudit-cuda info: $(cat "$tmp/info")"
  export KVAUDIT_CUDA_RUNNER="$tmp/kvaudit-cuda"
  "$tmp/kvaudit" checksum -o json s/producer >cpu.json
  "$tmp/kvaudit" checksum --engine auto -o json s/producer >auto.json 2>auto.err
  cat auto.err
  cmp cpu.json auto.json
  grep -q '^kvaudit: note: the CUDA engine is unavailable: .*; using the cpu engine$' auto.err
  [ "$(wc -l <auto.err)" -eq 1 ]
  rc=0
  "$tmp/kvaudit" checksum --engine cuda s/producer >/dev/null 2>cuda.err || rc=$?
  cat cuda.err
  [ "$rc" -eq 3 ] || { echo "--engine cuda exited $rc, want 3" >&2; exit 1; }
fi

echo
echo "CUDA CI passed in $(($(date +%s) - started)) s"
