#!/bin/sh
# Installs what tests/server/test_js_interop.py needs: the pinned node modules (npm ci, when the
# lockfile changed) and, under CI, Chromium for the playground test.
set -eu
cd "$(dirname "$0")"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
if [ "${CI:-}" = "true" ] && ! command -v chromium >/dev/null 2>&1; then
  apt-get update -q && apt-get install -y -q chromium
fi
