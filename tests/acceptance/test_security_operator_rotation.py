"""The real CLI against a real ``parley serve``: rotating the operator's tokens does not lock
the CLI out, since the hub rewrites the token file the CLI reads."""

from __future__ import annotations

import stat

from tests.acceptance.cli_support import Cli, ServedHub


def test_cli_still_works_after_rotating_the_operator_token(cli: Cli, hub: ServedHub) -> None:
    old = hub.token
    rotated = cli.json("token", "issue", "operator", "--rotate")
    assert rotated["token"] != old
    assert hub.token == rotated["token"]
    assert stat.S_IMODE((hub.home / "operator.token").stat().st_mode) == 0o600
    me = cli.json("whoami")
    assert me["id"] == "operator"
    cli.fails("whoami", token=old, code="invalid_token")
