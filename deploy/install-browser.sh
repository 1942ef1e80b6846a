#!/usr/bin/env bash
# Headless browser for the UI test (tests/flows/test_ui.py): Debian's chromium and chromedriver.
# Idempotent: does nothing when /usr/bin/chromium is already installed. Needs root (or sudo).
set -euo pipefail

if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
    exit 0
fi
SUDO=""
if [[ "$(id -u)" -ne 0 ]]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium chromium-driver
