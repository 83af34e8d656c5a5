"""``parley status`` shows the hub at a glance and ``parley ui`` prints a sign-in link that
works once — the real CLI against a real ``parley serve``."""

from __future__ import annotations

import json

import httpx

from tests.acceptance.cli_support import Cli, ServedHub


def test_status_shows_the_hub_its_agents_and_open_blockers(cli: Cli, hub: ServedHub) -> None:
    cli.json("agent", "add", "alice")
    alice = cli.json("token", "issue", "alice")["token"]
    cli.json("mail", "send", "operator", "--kind", "blocker", "--subject", "stuck", token=alice)
    data = cli.json("status")
    assert data["hub"]["url"] == hub.url
    assert data["readiness"]["status"] == "ready"
    assert data["readiness"]["store"] in ("sqlite", "postgresql")
    assert [(a["id"], a["state"]) for a in data["agents"]] == [("alice", "idle")]
    assert [b["subject"] for b in data["open_blockers"]] == ["stuck"]
    assert data["workers"] == [] and data["tasks"] == [] and data["meetings"] == []
    readable = cli.ok("status").stdout
    assert hub.url in readable and "ready" in readable and "stuck" in readable
    # An agent sees the hub, not the operator's view.
    own = cli.json("status", token=alice)
    assert own["you"]["id"] == "alice" and "agents" not in own


def test_ui_prints_a_one_time_sign_in_link_without_opening_a_browser(
    cli: Cli, hub: ServedHub
) -> None:
    shown = cli.ok("ui", "--json", env={"DISPLAY": "", "WAYLAND_DISPLAY": ""})
    data = json.loads(shown.stdout)
    assert data["opened"] is False
    assert data["link"].startswith(f"{hub.url}/ui/signin/link?key=")
    assert hub.token not in data["link"]
    with httpx.Client() as browser:
        first = browser.get(data["link"])
        assert first.status_code == 303 and "parley_session=" in first.headers["set-cookie"]
    with httpx.Client() as again:
        assert again.get(data["link"]).status_code == 401
    cli.fails("ui", token="pt_not-a-token", code="invalid_token")


def test_serve_names_the_web_ui_and_its_api_docs_work_offline(hub: ServedHub) -> None:
    banner = hub.output.text()
    assert f"web UI          {hub.url}/ui/" in banner
    with httpx.Client(base_url=hub.url) as anyone:
        page = anyone.get("/docs")
        assert page.status_code == 200
        # Nothing from another host: the page works without the internet.
        assert "cdn" not in page.text and "https://" not in page.text.split("<body>")[-1]
        for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
            assert f"/ui/static/swagger-ui/{asset}" in page.text
            served = anyone.get(f"/ui/static/swagger-ui/{asset}")
            assert served.status_code == 200 and len(served.content) > 100_000
        assert anyone.get("/redoc", follow_redirects=True).url.path == "/docs"
