#!/usr/bin/env bash
# Install parley into .venv (once) and run the demo: a hub with scripted agents holding a
# discussion you can watch. Extra arguments go to `parley demo`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib.sh
ensure_venv .venv .
exec .venv/bin/parley demo "$@"
