"""A principal's tokens one by one: issued with a label, listed with when each was issued and
last used (never the secret), and revoked one at a time while the others keep working."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from parley.core.identity import hash_token
from parley.service.hub import Hub
from parley.testing import FakeClock
from tests.conftest import MakeAgent


async def test_tokens_are_labelled_listed_and_revoked_one_at_a_time(
    hub: Hub, make_agent: MakeAgent, api: Any, clock: FakeClock
) -> None:
    bot = await make_agent("bot")
    other = await make_agent("other")
    op = api(hub.operator_token)
    clock.advance(1)  # listed oldest first
    issued = await op.post("/v1/principals/bot/tokens", json={"label": "claude-code"})
    assert issued.status_code == 201, issued.text
    laptop = issued.json()
    assert laptop["label"] == "claude-code"
    assert laptop["id"] == hash_token(laptop["token"])[:12]
    bad = await op.post("/v1/principals/bot/tokens", json={"label": "  "})
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_label")

    listed = (await op.get("/v1/principals/bot/tokens")).json()
    assert [t["label"] for t in listed] == ["initial", "claude-code"]
    assert all(set(t) == {"id", "label", "created", "last_used"} for t in listed)
    assert bot.token not in str(listed) and laptop["token"] not in str(listed)
    assert {t["id"]: t["last_used"] for t in listed}[laptop["id"]] is None

    clock.advance(120)
    assert (await api(laptop["token"]).get("/v1/whoami")).status_code == 200
    used = {t["id"]: t["last_used"] for t in (await op.get("/v1/principals/bot/tokens")).json()}
    assert used[laptop["id"]] is not None
    assert (clock.now() - timedelta(seconds=1)).isoformat() < used[laptop["id"]]

    # The principal reads its own list; nobody else but the operator does, and only the
    # operator revokes.
    assert (await api(bot.token).get("/v1/principals/bot/tokens")).status_code == 200
    peek = await api(other.token).get("/v1/principals/bot/tokens")
    assert (peek.status_code, peek.json()["code"]) == (403, "operator_only")
    self_revoke = await api(bot.token).delete(f"/v1/principals/bot/tokens/{laptop['id']}")
    assert (self_revoke.status_code, self_revoke.json()["code"]) == (403, "operator_only")

    revoked = await op.delete(f"/v1/principals/bot/tokens/{laptop['id']}")
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["label"] == "claude-code"
    gone = await api(laptop["token"]).get("/v1/whoami")
    assert (gone.status_code, gone.json()["code"]) == (401, "invalid_token")
    assert (await api(bot.token).get("/v1/whoami")).status_code == 200
    again = await op.delete(f"/v1/principals/bot/tokens/{laptop['id']}")
    assert (again.status_code, again.json()["code"]) == (404, "token_not_found")
    left = [t["label"] for t in (await op.get("/v1/principals/bot/tokens")).json()]
    assert left == ["initial"]
