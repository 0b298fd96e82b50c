#!/usr/bin/env bash
# System packages assay needs: bubblewrap (the sandbox for every agent command), python3-venv
# where Python lacks venv, and, for the full test suite, chromium (web app browser tests) and
# postgresql (store tests).
# Usage: scripts/setup-system.sh [--minimal]   (--minimal installs only bubblewrap)
set -euo pipefail
pkgs=(bubblewrap)
if [ "${1:-}" != "--minimal" ]; then
  pkgs+=(chromium postgresql)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Debian's own Python needs python3-venv for the virtual environment the README makes.
if ! python3 -c "import ensurepip, venv" >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-system: all present (${pkgs[*]})"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup-system: installed ${missing[*]}"
