#!/usr/bin/env bash
# Run the test suite on SQLite, then on PostgreSQL when one answers (always in CI), each run in
# parallel processes (pytest-xdist), and print how long each took.
#
#   scripts/test.sh             everything on SQLite, then the store contract on PostgreSQL
#   scripts/test.sh --quick     core and service tests on SQLite only (no browser, no Discord
#                               bridge, no subprocess hubs, no API fuzzing): the inner loop
#   scripts/test.sh -x tests/integration/test_leases.py    extra arguments go to every run
#
# What runs where is decided in tests/conftest.py: the store contract on both backends, tests
# whose subject is not the store once (on SQLite). PARLEY_TEST_WORKERS sets the number of
# processes (default: cores + 1; 0 runs in this process); PARLEY_VENV picks the virtualenv
# (default .venv); PARLEY_TEST_PG_URL the PostgreSQL server.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/lib.sh

quick=
if [ "${1:-}" = --quick ]; then
    quick=1
    shift
fi

VENV=${PARLEY_VENV:-.venv}
ensure_venv "$VENV" '.[dev]'
[ -n "$quick" ] || ensure_browser
PY=$VENV/bin/python
PG_URL=${PARLEY_TEST_PG_URL:-postgresql://postgres@127.0.0.1:5432/test}
# The suite waits on subprocesses, sockets and the database more than it computes: one more
# process than there are cores keeps the cores busy.
WORKERS=${PARLEY_TEST_WORKERS:-$(($(nproc) + 1))}

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
durations=()
run_suite() {
    local backend=$1 rc=0 started
    shift
    echo "==> pytest --backend $backend -n $WORKERS $*"
    started=$(date +%s)
    "$PY" -m pytest --backend "$backend" -n "$WORKERS" "$@" || rc=$?
    durations+=("$backend: $(($(date +%s) - started)) s")
    if [ "$rc" -eq 5 ]; then
        echo "no tests were collected on $backend" >&2
    fi
    return "$rc"
}

failed=()
ran=(sqlite)
if [ -n "$quick" ]; then
    run_suite sqlite tests/unit tests/integration --ignore=tests/integration/discord \
        --ignore=tests/integration/test_api_fuzz.py "$@" || failed+=(sqlite)
else
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
fi

echo "durations: ${durations[*]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "FAILED on: ${failed[*]}" >&2
    exit 1
fi
echo "tests passed on: ${ran[*]}"
