#!/usr/bin/env bash
# Installs the Debian 12 packages ember needs to build and test, when missing.
# Uses sudo when not run as root. Prints nothing when everything is present.
set -euo pipefail

packages=(build-essential cmake git pkg-config python3 python3-pip libeigen3-dev libfmt-dev catch2 libbenchmark-dev
  # The ARM64 cross build and its tests under emulation (scripts/test-arm.sh).
  g++-aarch64-linux-gnu qemu-user
  # A compiler cache: scripts/test.sh compiles the library four times (the main build, the
  # shared-library install test, the ARM64 and the emulated-VNNI builds), mostly the same
  # translation units.
  ccache)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "ember: installing Debian packages: ${missing[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "ember: need root (or sudo) to install: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
