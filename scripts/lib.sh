# Shared by scripts/quickstart.sh, scripts/test.sh and .ci/run (sourced, not run): find a
# Python >= 3.11 and keep a virtualenv with parley installed in it.

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    echo "parley needs Python 3.11 or newer: install it, or set PYTHON=/path/to/python3.11" >&2
    return 1
}

# ensure_venv DIR SPEC: create DIR if missing and `pip install -e SPEC` into it, skipping the
# install when the same SPEC was installed from the same pyproject.toml before.
ensure_venv() {
    local venv=$1 spec=$2 python stamp want
    if [ ! -x "$venv/bin/python" ]; then
        python=$(find_python)
        echo "creating $venv with $python" >&2
        "$python" -m venv "$venv"
    fi
    if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "$venv has a Python older than 3.11; delete it and run this again" >&2
        return 1
    fi
    stamp="$venv/.parley-installed"
    want="$spec $(sha256sum pyproject.toml | cut -d' ' -f1)"
    if [ -f "$stamp" ] && grep -qxF -- "$want" "$stamp"; then
        return 0
    fi
    echo "installing parley ($spec) into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$spec"
    echo "$want" >>"$stamp"
}

# ensure_browser: Debian's chromium for the web UI's browser tests (Playwright cannot download a
# browser here). Installed with apt when missing and we may; otherwise say what to do.
ensure_browser() {
    command -v "${PARLEY_TEST_CHROMIUM:-chromium}" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's chromium for the web UI tests" >&2
        apt-get update -qq </dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium </dev/null
        return 0
    fi
    echo "the web UI tests need Chromium: install Debian's chromium package" \
        "(or set PARLEY_TEST_CHROMIUM to a Chromium binary)" >&2
    return 1
}
