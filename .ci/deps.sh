#!/usr/bin/env bash
# Installs every Debian package CI needs before any step uses one, so that
# each step of .ci/run has what it needs on a machine with nothing but Go,
# git and gcc (a fresh Debian 12 root, as CI machines are;
# proved with a debootstrap chroot, see .ci/run). One apt-get update and
# one install of what is missing; what is already there is left alone.
#
#   nvidia-cuda-toolkit, nvidia-cuda-dev  cuda.h, nvcc and ptxas 11.8 (non-free):
#                                          staticcheck -tags cuda, the PTX check,
#                                          the kvaudit-cuda build (.ci/cuda.sh)
#   python3-numpy, python3-torch, python3-venv, python3-wheel
#                                          examples/vllm's exporter, connector and
#                                          recorder tests; its install test
#                                          (pip install --no-build-isolation
#                                          needs wheel beside the venv's setuptools)
#   chromium                               the HTML report's browser test
#   slurm-wlm, munge                       the scale-out example on a real Slurm
set -euo pipefail
want_nvcc="release 11.8, V11.8.89"

. /etc/os-release
if [ "${ID:-}" != debian ] || [ "${VERSION_CODENAME:-}" != bookworm ]; then
  echo "CI installs its packages from Debian 12 (bookworm); this is ${PRETTY_NAME:-an unknown system}" >&2
  exit 1
fi

missing=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }
if ! command -v nvcc >/dev/null || ! nvcc --version | grep -q "$want_nvcc" || [ ! -f /usr/include/cuda.h ]; then
  missing+=(nvidia-cuda-toolkit nvidia-cuda-dev)
fi
for p in python3-numpy python3-torch python3-venv python3-wheel chromium slurm-wlm munge; do
  have_pkg "$p" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "all of CI's packages are installed"
  exit 0
fi
echo "installing: ${missing[*]}"

# The CUDA toolkit is in non-free: enable contrib and non-free (deb822 or
# one-line sources).
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  sed -i -E '/^Components:/{/non-free( |$)/!s/$/ contrib non-free non-free-firmware/}' /etc/apt/sources.list.d/debian.sources
fi
if [ -f /etc/apt/sources.list ]; then
  sed -i -E '/^deb .* main/{/non-free( |$)/!s/$/ contrib non-free non-free-firmware/}' /etc/apt/sources.list
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1 ||
  { tail -40 "$log"; exit 1; }
nvcc --version | tail -1
