"""M9 mailroom files: export, import, and export → import → export byte for byte."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from parley.bootstrap import build_hub
from parley.config import Settings
from parley.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from parley.core.identity import Principal
from parley.core.ids import new_ulid
from parley.service.hub import Hub
from parley.service.identity import AgentSpec
from parley.surfaces.rest.app import create_app
from parley.testing import FakeClock
from tests.conftest import PG_ADMIN_URL, MakeAgent, _pg_dsn
from tests.integration.mail_support import all_messages, main_session_id, send

SEED = Path(__file__).parent / "fixtures" / "mailroom_seed"
AGENTS = ("alice", "bob", "carol")


def seed_files() -> dict[str, str]:
    return {
        p.relative_to(SEED).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(SEED.rglob("*.md"))
    }


@asynccontextmanager
async def empty_hub(backend: str, tmp_path: Path, clock: FakeClock) -> AsyncIterator[Hub]:
    """A second, empty hub on its own database of the same backend."""
    home = tmp_path / f"other-{new_ulid()}"
    name = f"parley_t_{new_ulid().lower()}"
    if backend == "sqlite":
        url = f"sqlite:///{home / 'parley.db'}"
    else:
        admin = await asyncpg.connect(PG_ADMIN_URL)
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        url = _pg_dsn(name)
    hub = build_hub(Settings(home=home, database_url=url), clock=clock)
    await hub.start(background=False)
    try:
        yield hub
    finally:
        await hub.stop()
        if backend != "sqlite":
            admin = await asyncpg.connect(PG_ADMIN_URL)
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await admin.close()


async def operator_of(hub: Hub) -> Principal:
    assert hub.operator_token is not None
    return await hub.identity.authenticate(hub.operator_token)


async def add_agents(hub: Hub, *ids: str) -> dict[str, Principal]:
    op = await operator_of(hub)
    return {i: (await hub.identity.create_agent(op, AgentSpec(id=i))).principal for i in ids}


async def fill_mailroom(hub: Hub, clock: FakeClock) -> dict[str, str]:
    """Mail of many kinds and states; returns a few of their ids by role."""
    op = await operator_of(hub)
    a = await add_agents(hub, *AGENTS)
    alice, bob, carol = a["alice"], a["bob"], a["carol"]
    ids: dict[str, str] = {}
    task = await send(
        hub,
        op,
        "bob",
        "task",
        subject="W18.1 任务: 评审 mailroom 设计 ✓",
        body="请读 README 并评估：\n- 一\n- 二\n\n字数上限 250。",
        labels=["wave:W18.1", "fix:F-13.5-1", "priority: high"],
    )
    ids["task"] = task.id
    clock.advance(90)
    report = await send(
        hub,
        bob,
        "operator",
        "report",
        subject="W18.1 评审结论",
        body="赞成。",
        labels=["wave:W18.1"],
        related=[task.id],
        correlation_id="tx-18",
        parent_message_id=task.id,
    )
    ids["report"] = report.id
    handoff = await send(hub, bob, "carol", "handoff", subject="over to you", labels=["wave:W18.2"])
    await hub.mail.update_status(carol, handoff.id, "closed")  # archived under W18.2
    ids["handoff"] = handoff.id
    # Two files would share one name: same minute, kind, sender and recipient.
    first = await send(hub, carol, "bob", "handoff", subject="first")
    second = await send(hub, carol, "bob", "handoff", subject="second", body="")
    ids["first"], ids["second"] = first.id, second.id
    blocker = await send(hub, alice, "bob", "blocker", subject="", body="# no subject heading")
    ids["blocker"] = blocker.id
    clock.advance(60)
    notice = await send(hub, op, "*", "notice", subject="files locked", cc=["carol"])
    bob_copy = [
        m for m in await all_messages(hub) if m.to_kind == "broadcast" and m.recipient_id == "bob"
    ]
    await hub.mail.archive(bob, bob_copy[0].id, "W18")
    ids["notice"] = notice.id
    session_id = await main_session_id(hub, "alice")
    dispatch = await send(
        hub,
        bob,
        f"session:{session_id}",
        "task-dispatch",
        subject="run the tests",
        payload={"prompt": "ctest -R smoke", "budget": 2000, "inherit": True},
        ttl_seconds=3600,
    )
    ids["dispatch"] = dispatch.id
    for kind in ("task-result", "cancel", "takeover", "context-inject", "info", "minutes"):
        await send(hub, carol, "alice", kind, subject=f"{kind} note", body=f"about {kind}")
    doomed = await send(hub, alice, "carol", "status-update", subject="short-lived", ttl_seconds=30)
    ids["expired"] = doomed.id
    await hub.mail.update_status(bob, task.id, "in_progress")
    await hub.mail.update_status(carol, doomed.id, "read")
    clock.advance(31)
    assert [m.id for m in await hub.mail.expire_due()] == [doomed.id]
    closed_again = await send(hub, alice, "bob", "report", subject="redeliver me")
    await hub.mail.archive(bob, closed_again.id, None)
    copy = await hub.mail.redeliver(op, closed_again.id)
    ids["redelivered"] = copy.id
    return ids


async def test_export_import_export_is_byte_identical(
    hub: Hub, backend: str, tmp_path: Path, clock: FakeClock
) -> None:
    ids = await fill_mailroom(hub, clock)
    op = await operator_of(hub)
    exported = await hub.mailroom.export(op)
    originals = {m.id: m for m in await all_messages(hub)}
    assert len(exported) == len(originals)

    # The layout: open mail by inbox, closed mail by label, collisions numbered.
    paths = set(exported)
    t0 = "2026-01-01T0000"
    assert f"inbox/bob/{t0}-task-ceo-to-bob.md" in paths
    assert f"inbox/ceo/{t0}-report-bob-to-ceo.md" not in paths  # sent 90 s later
    assert "inbox/ceo/2026-01-01T0001-report-bob-to-ceo.md" in paths
    assert "archive/W18.2/2026-01-01T0001-handoff-bob-to-carol.md" in paths
    assert "archive/W18/2026-01-01T0002-notice-ceo-to-all.md" in paths
    assert "inbox/carol/2026-01-01T0002-notice-ceo-to-all.md" in paths
    assert "archive/unlabelled/2026-01-01T0003-report-alice-to-bob.md" in paths
    assert "inbox/bob/2026-01-01T0003-report-alice-to-bob.md" in paths  # the redelivered copy
    first = exported["inbox/bob/2026-01-01T0001-handoff-carol-to-bob.md"]
    second = exported["inbox/bob/2026-01-01T0001-handoff-carol-to-bob-2.md"]
    assert f"id: {ids['first']}\n" in first and f"id: {ids['second']}\n" in second
    assert any(p.startswith("inbox/ceo/") and "-blocker-alice-to-bob" in p for p in paths)
    assert any("-task-dispatch-bob-to-session-vs-" in p for p in paths)
    expired = next(t for t in exported.values() if f"id: {ids['expired']}\n" in t)
    assert "status: expired\n" in expired and "failure: ttl_expired\n" in expired
    task = exported[f"inbox/bob/{t0}-task-ceo-to-bob.md"]
    assert task.startswith(
        f"---\nid: {ids['task']}\nfrom: ceo\nto: bob\nwave: W18.1\nkind: task\n"
        "status: in_progress\ncreated: 2026-01-01T00:00\nfixes:\n- F-13.5-1\n"
        'labels:\n- "priority: high"\nfrom_kind: human\ndelivered_at: 2026-01-01T00:02:30.000000Z\n'
    )
    assert "\n---\n# W18.1 任务: 评审 mailroom 设计 ✓\n\n请读 README" in task

    async with empty_hub(backend, tmp_path, clock) as other:
        other_op = await operator_of(other)
        await add_agents(other, *AGENTS)
        result = await other.mailroom.import_files(other_op, exported)
        assert (result.imported, result.skipped, result.ignored) == (len(exported), 0, [])
        assert await other.mailroom.export(other_op) == exported
        # Every field of every message, inbox positions included (M9: lossless).
        imported = {m.id: m for m in await all_messages(other)}
        assert imported == originals
        # Imported mail behaves like any other: its owner can read it and move it on.
        bob = await other.identity.require("bob")
        await other.mail.update_status(bob, ids["first"], "read")
        # A second import of the same files changes nothing.
        again = await other.mailroom.import_files(other_op, exported)
        assert (again.imported, again.skipped) == (0, len(exported))
        assert set(again.skipped_ids) == set(originals)
        assert len(await all_messages(other)) == len(originals)


async def test_the_round_trip_over_rest(
    hub: Hub, api: Any, backend: str, tmp_path: Path, clock: FakeClock
) -> None:
    await fill_mailroom(hub, clock)
    assert hub.operator_token is not None
    r = await api(hub.operator_token).get("/v1/mailroom/export")
    assert r.status_code == 200
    files = r.json()["files"]
    assert files == await hub.mailroom.export(await operator_of(hub))
    async with empty_hub(backend, tmp_path, clock) as other:
        await add_agents(other, *AGENTS)
        assert other.operator_token is not None
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(hub=other)),
            base_url="http://other.test",
            headers={"Authorization": f"Bearer {other.operator_token}"},
        ) as client:
            r = await client.post("/v1/mailroom/import", json={"files": files})
            assert r.status_code == 200, r.text
            assert r.json() == {
                "imported": len(files),
                "skipped": 0,
                "skipped_ids": [],
                "ignored": [],
            }
            r = await client.get("/v1/mailroom/export")
            assert r.json()["files"] == files


async def test_the_seed_examples_import_with_their_fields(
    hub: Hub, api: Any, make_agent: MakeAgent, operator: Principal
) -> None:
    architect = await make_agent("architect-lin")
    await make_agent("qa-xu")
    files = seed_files()
    assert len(files) == 3
    result = await hub.mailroom.import_files(operator, files)
    assert (result.imported, result.skipped) == (3, 0)
    rows = {m.id: m for m in await all_messages(hub)}
    task = rows["msg-W18.1-001"]
    assert (task.from_kind, task.from_id) == ("human", "operator")
    assert (task.to_kind, task.to_id, task.recipient_id) == (
        "agent",
        "architect-lin",
        "architect-lin",
    )
    assert (task.kind, task.status, task.labels) == ("task", "pending", ["wave:W18.1"])
    assert task.created == datetime(2026, 5, 31, 15, 0, tzinfo=UTC)
    assert task.subject == "W18.1 任务: 评审 mailroom 设计"
    assert task.body.startswith("请读 agents/mailroom/README.md 并评估：\n- 是否值得")
    assert task.body.endswith("完成后请发 report 邮件回 ceo。")
    assert (task.closed_at, task.related, task.archive_label) == (None, [], None)
    report = rows["msg-W18.1-002"]
    assert (report.from_kind, report.from_id, report.recipient_id) == (
        "agent",
        "architect-lin",
        "operator",
    )
    assert (report.kind, report.related) == ("report", ["msg-W18.1-001"])
    assert report.created == datetime(2026, 5, 31, 16, 30, tzinfo=UTC)
    handoff = rows["msg-W18.2-003"]
    # The sender is not an agent of this hub: the mail is kept, its sender marked external.
    assert (handoff.from_kind, handoff.from_id, handoff.recipient_id) == (
        "external",
        "engineer-sun",
        "qa-xu",
    )
    assert (handoff.kind, handoff.labels, handoff.related) == (
        "handoff",
        ["wave:W18.2"],
        ["msg-W18.2-001"],
    )
    assert "`ctest -R lsp_plugin_test`" in handoff.body
    # The seed's own files are what parley writes back, under the same names, line for line;
    # the hub adds only what the seed's keys cannot say (the sender's kind, the inbox position).
    exported = await hub.mailroom.export(operator)
    assert set(exported) == set(files)
    for path, text in files.items():
        seed_front, seed_rest = text.split("\n---\n", 1)
        front, rest = exported[path].split("\n---\n", 1)
        assert rest == seed_rest
        assert front.startswith(seed_front + "\n")
        added = [line.split(":")[0] for line in front.removeprefix(seed_front).splitlines()[1:]]
        assert added == ["from_kind", "seq"], path
    # The recipient finds the imported mail in its inbox and works it like any other.
    inbox = (await api(architect.token).get("/v1/agents/architect-lin/inbox")).json()
    assert [m["id"] for m in inbox] == ["msg-W18.1-001"]
    r = await api(architect.token).post("/v1/mail/msg-W18.1-001/status", json={"status": "closed"})
    assert (r.status_code, r.json()["archive_label"]) == (200, "W18.1")
    exported = await hub.mailroom.export(operator)
    assert "archive/W18.1/2026-05-31T1500-task-ceo-to-architect-lin.md" in exported


async def test_only_the_operator_exports_or_imports(
    hub: Hub, api: Any, make_agent: MakeAgent
) -> None:
    alice = await make_agent("alice")
    await make_agent("architect-lin")
    await make_agent("qa-xu")
    r = await api(alice.token).get("/v1/mailroom/export")
    assert (r.status_code, r.json()["code"]) == (403, "operator_only")
    r = await api(alice.token).post("/v1/mailroom/import", json={"files": seed_files()})
    assert (r.status_code, r.json()["code"]) == (403, "operator_only")
    with pytest.raises(PermissionDenied):
        await hub.mailroom.export(alice.principal)
    assert await all_messages(hub) == []


async def test_an_import_is_all_or_nothing(
    hub: Hub, api: Any, make_agent: MakeAgent, operator: Principal
) -> None:
    await make_agent("architect-lin")  # qa-xu and the seed's sender do not exist
    assert hub.operator_token is not None
    r = await api(hub.operator_token).post("/v1/mailroom/import", json={"files": seed_files()})
    assert r.status_code == 404
    err = r.json()
    assert err["code"] == "recipient_not_found"
    assert err["details"]["recipients"] == ["qa-xu"]
    assert "'qa-xu'" in err["message"] and "POST /v1/agents" in err["message"]
    assert await all_messages(hub) == []
    files = seed_files()
    files["inbox/qa-xu/broken.md"] = "no frontmatter at all\n"
    with pytest.raises(InvalidRequest) as info:
        await hub.mailroom.import_files(operator, files)
    assert info.value.code == "invalid_mailroom_file"
    assert "'inbox/qa-xu/broken.md'" in info.value.message
    assert await all_messages(hub) == []


async def test_an_existing_id_is_skipped_not_overwritten(
    hub: Hub, make_agent: MakeAgent, operator: Principal
) -> None:
    await make_agent("architect-lin")
    await make_agent("qa-xu")
    files = seed_files()
    first = await hub.mailroom.import_files(operator, dict(list(files.items())[:1]))
    assert first.imported == 1
    changed = {p: t.replace("pending", "read") for p, t in files.items()}
    changed["README.md"] = "# Mailroom\n"
    result = await hub.mailroom.import_files(operator, changed)
    assert (result.imported, result.skipped, result.ignored) == (2, 1, ["README.md"])
    [skipped_id] = result.skipped_ids
    rows = {m.id: m for m in await all_messages(hub)}
    assert rows[skipped_id].status == "pending"  # the hub's copy won
    assert all(m.status == "read" for i, m in rows.items() if i != skipped_id)


async def test_imported_mail_reaches_live_inbox_streams_and_the_event_log(
    hub: Hub, api: Any, make_agent: MakeAgent, operator: Principal
) -> None:
    await make_agent("architect-lin")
    await make_agent("qa-xu")
    sub = hub.bus.subscribe(["inbox:qa-xu"])
    try:
        await hub.mailroom.import_files(operator, seed_files())
        live = await sub.get()
    finally:
        await sub.close()
    assert (live["type"], live["message"]["id"]) == ("mail", "msg-W18.2-003")
    assert hub.operator_token is not None
    r = await api(hub.operator_token).get("/v1/events", params={"type": "mailroom.imported"})
    [event] = r.json()
    assert event["actor"] == "operator"
    assert sorted(event["payload"]["imported"]) == [
        "msg-W18.1-001",
        "msg-W18.1-002",
        "msg-W18.2-003",
    ]


async def test_a_missing_inbox_owner_is_reported_for_the_service(
    hub: Hub, operator: Principal
) -> None:
    with pytest.raises(NotFound) as info:
        await hub.mailroom.import_files(operator, seed_files())
    assert info.value.details["recipients"] == ["architect-lin", "qa-xu"]


async def test_an_idempotency_key_another_message_holds_is_refused(
    hub: Hub, operator: Principal
) -> None:
    """A sender's idempotency key stays unique through an import: held by a stored message or
    by an earlier file of the same import, the import is refused whole."""
    agents = await add_agents(hub, "alice", "bob")
    sent = await send(hub, agents["alice"], "bob", "task", subject="once", idempotency_key="k-1")
    [original] = (await hub.mailroom.export(operator)).values()
    key = "idempotency_key: k-1\n"
    assert key in original

    def copy(new_id: str, new_key: str = "k-1") -> str:
        text = original.replace(f"id: {sent.id}\n", f"id: {new_id}\n")
        return text.replace(key, f"idempotency_key: {new_key}\n")

    with pytest.raises(Conflict) as info:
        await hub.mailroom.import_files(operator, {"inbox/bob/a.md": copy("msg-copy-1")})
    assert (info.value.code, info.value.details["id"]) == ("idempotency_key_taken", "msg-copy-1")
    assert f"{sent.id!r} already holds" in info.value.message

    files = {
        "inbox/bob/a.md": copy("msg-copy-1", "k-2"),
        "inbox/bob/b.md": copy("msg-copy-2", "k-2"),
    }
    with pytest.raises(Conflict) as info:
        await hub.mailroom.import_files(operator, files)
    assert info.value.details["id"] == "msg-copy-2"
    assert "'msg-copy-1' already holds" in info.value.message
    assert [m.id for m in await all_messages(hub)] == [sent.id]
