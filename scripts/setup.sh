#!/usr/bin/env bash
# Installs what strata needs from Debian's packages. Idempotent, and silent when all is there.
# Both README commands run this first; add a new dependency here and nowhere else.
set -euo pipefail

packages=(
  cmake ninja-build g++ clang libclang-rt-14-dev clang-format pkg-config git
  liburing-dev libisal-dev libhwloc-dev libtbb-dev
  libopenmpi-dev openmpi-bin libopenblas-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libyaml-cpp-dev
  libpcre2-dev libutf8proc-dev
  fio gnuplot-nox
  nodejs
  python3-torch python3-numpy python3-pytest pybind11-dev python3-dev python3-venv python3-pip
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
# The tokenizer's reference check fetches its references with npm. Debian ships npm apart from
# nodejs; a nodejs packaged with its own npm (NodeSource's) conflicts with Debian's npm, so the
# package is asked for only where the command is missing.
if ! command -v npm > /dev/null; then missing+=(npm); fi
((${#missing[@]} == 0)) && exit 0

sudo=""
if [[ "$(id -u)" -ne 0 ]]; then sudo="sudo"; fi
echo "strata setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
