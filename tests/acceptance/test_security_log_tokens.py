"""``parley serve --log-level info`` writes an access log; a token passed as ``?token=`` (the
event streams take one, for browsers) must not appear in it, nor in any other line."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.acceptance.cli_support import spawn_hub, wait_ready

READ_S = 30.0


def test_a_query_token_is_redacted_from_the_access_log(
    tmp_path: Path, backend: str, database_url: str
) -> None:
    hub = spawn_hub(
        tmp_path / "home",
        database_url=database_url if backend == "postgres" else None,
        extra_args=["--log-level", "info"],
    )
    try:
        wait_ready(hub)
        token = hub.token
        wrong = "pt_" + "x" * 43
        with httpx.Client(base_url=hub.url, timeout=READ_S) as client:
            with client.stream(
                "GET", "/v1/agents/operator/inbox/stream", params={"token": token}
            ) as response:
                assert response.status_code == 200
            refused = client.delete("/v1/tasks/stream", params={"token": wrong})
            assert refused.status_code == 401
        # Both requests are in the access log, each with its token replaced.
        hub.output.wait_for(lambda line: "DELETE /v1/tasks/stream?token=***" in line, READ_S)
        assert "/v1/agents/operator/inbox/stream?token=***" in hub.output.text()
    finally:
        hub.stop()
    output = hub.output.until_end(READ_S)
    assert token not in output
    assert wrong not in output
