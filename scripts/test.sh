#!/usr/bin/env bash
# Run the whole test suite on SQLite, then on PostgreSQL when one answers (always in CI).
# Extra arguments go to both pytest runs, e.g. `scripts/test.sh -x tests/unit`.
# PARLEY_VENV picks the virtualenv (default .venv); PARLEY_TEST_PG_URL the PostgreSQL server.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib.sh

VENV=${PARLEY_VENV:-.venv}
ensure_venv "$VENV" '.[dev]'
ensure_browser
PY=$VENV/bin/python
PG_URL=${PARLEY_TEST_PG_URL:-postgresql://postgres@127.0.0.1:5432/test}

postgres_answers() {
    PG_URL=$PG_URL "$PY" - <<'PYEOF' 2>/dev/null
import asyncio, os, sys
import asyncpg

async def probe() -> None:
    conn = await asyncpg.connect(os.environ["PG_URL"], timeout=5)
    await conn.close()

try:
    asyncio.run(probe())
except Exception:
    sys.exit(1)
PYEOF
}

# Any non-zero pytest status fails the run, 5 (no tests collected) included.
run_suite() {
    local backend=$1 rc=0
    shift
    echo "==> pytest --backend $backend $*"
    "$PY" -m pytest --backend "$backend" "$@" || rc=$?
    if [ "$rc" -eq 5 ]; then
        echo "no tests were collected on $backend" >&2
    fi
    return "$rc"
}

failed=()
ran=(sqlite)
run_suite sqlite "$@" || failed+=(sqlite)
if postgres_answers; then
    ran+=(postgres)
    run_suite postgres "$@" || failed+=(postgres)
elif [ "${CI:-}" = true ] || [ -n "${PARLEY_TEST_REQUIRE_POSTGRES:-}" ]; then
    echo "PostgreSQL does not answer at $PG_URL, and CI needs both backends" >&2
    failed+=(postgres)
else
    echo "PostgreSQL does not answer at $PG_URL: the PostgreSQL run was skipped" >&2
fi

if [ "${#failed[@]}" -gt 0 ]; then
    echo "FAILED on: ${failed[*]}" >&2
    exit 1
fi
echo "tests passed on: ${ran[*]}"
