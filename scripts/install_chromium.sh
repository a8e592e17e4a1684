#!/usr/bin/env bash
# Install Debian's chromium for the real-browser view tests (tests/views).
#
# Idempotent and quiet: does nothing when /usr/bin/chromium already exists.
# Uses only the Debian package archive (no browser downloads, never
# `playwright install`). Needs root (or sudo) for apt-get.
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null

if [ ! -x "$CHROMIUM" ]; then
    echo "install_chromium.sh: $CHROMIUM still missing after apt-get install" >&2
    exit 1
fi
