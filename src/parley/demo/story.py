"""``parley demo``: start the hub on its embedded SQLite store and show real work through its
REST API — mail between agents, a moderated discussion opened from a work channel that reports
back and wakes the session that asked for it, a meeting of the three in a room
(``meeting``), then a worker tree with a cancel and a takeover (``workers``).

Agents answer through an OpenAI-compatible endpoint when ``PARLEY_OPENAI_BASE_URL`` (and
``PARLEY_OPENAI_MODEL``, ``PARLEY_OPENAI_API_KEY``) are set, and then do every step of the
discussion themselves with the hub's tools: planner opens it, writes the summary and calls back.
Otherwise they answer through the scripted runtime, every scripted line is labelled as such, and
the demo makes the tool steps for planner over REST.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from parley.bootstrap import build_hub, default_runtimes
from parley.config import Settings, resolve_home, write_hub_info, write_operator_token
from parley.core.identity import hash_token
from parley.core.runtime import DONE_MARKER, Turn
from parley.demo.meeting import MeetingScene, MeetingScript, ScriptedVoice
from parley.demo.workers import WorkersScene, WorkersScript, WorkerVoice
from parley.home import DEFAULT_PORT
from parley.private_files import PRIVATE_UMASK
from parley.surfaces.cli.connect import parley_executable
from parley.surfaces.rest.app import create_app
from parley.surfaces.web.sessions import WebSessions
from parley.testing import StaticRuntimes

console = Console(highlight=False)
SIGN_IN_LINK_TTL_S = 600.0

AGENTS = {
    "planner": "Planner — designs the job queue and owns the task",
    "reviewer": "Reviewer — looks for failure modes",
    "tester": "Tester — turns claims into tests",
}
GUIDE = (
    "Choose the design of the job queue for the ingest service. Conclude with: the queue "
    "design, how starvation of low-priority jobs is prevented, and the test that proves it."
)
TASK = (
    "Design the job queue for the ingest service. Before you commit to a design, open a "
    "discussion with reviewer and tester and continue from its summary."
)
# With a model that has the hub's tools, the task says which tools do the steps.
TOOL_TASK = (
    f"{TASK} Open it with create_private_channel: name 'queue-design', members reviewer and "
    "tester, callbackChannelId your work channel (whoami tells you its id) and this "
    f"discussGuide: {GUIDE}"
)
SUMMARY_FILE = "queue-design-summary.md"
FINISH = (
    "planner: the rounds are over. Write the summary of this discussion (the design, how "
    f"starvation is prevented, the test) to {SUMMARY_FILE!r} in your workspace with write_file, "
    "then call discuss_callback with that path."
)

# Scripted lines by (agent, round). They quote each other so the demo shows context flowing
# between speakers; a real model produces its own words through the same path.
SCRIPT: dict[tuple[str, int], str] = {
    ("planner", 1): (
        "Proposal: one PostgreSQL table as the queue, workers claim jobs with "
        "SELECT … FOR UPDATE SKIP LOCKED, ordered by priority. Question for reviewer: can "
        "low-priority jobs starve under a steady stream of high-priority ones?"
    ),
    ("reviewer", 1): (
        "Yes: strict priority order starves low-priority jobs during bursts. Question for "
        "planner: what bounds the wait of a low-priority job?"
    ),
    ("tester", 1): (
        "I can generate a burst of high-priority jobs and measure the oldest low-priority "
        "wait. Question for planner: what bound should the test assert?"
    ),
    ("planner", 2): (
        "Answer to reviewer and tester: order by priority plus age (effective priority grows "
        "one step per 30 s of waiting), so every job is claimed within a bounded time. The "
        "test should assert no job waits more than 5 minutes under a 10× burst. " + DONE_MARKER
    ),
    ("reviewer", 2): ("Aging bounds the wait; I accept the design. " + DONE_MARKER),
    ("tester", 2): (
        "I will write the burst test with the 5-minute bound as the assertion. " + DONE_MARKER
    ),
}


def _scripted_reply(turn: Turn) -> str:
    agent = turn.agent.id
    if turn.round is None or turn.prompt.task == "" or "work channel" in turn.prompt.system:
        text = turn.prompt.user_text()
        if "[Discussion Result Ready]" in text:
            # The transcript is JSON, so the message's line breaks appear escaped.
            found = re.search(r"Summary file:(?:\\n|\n)+\s*(.+?)(?:\\n|\n)", text)
            path = found.group(1) if found else "the summary file"
            return (
                f"Read the discussion summary {path}. Continuing the ingest queue with "
                "priority aging and the burst test."
            )
        return "Opening a discussion with reviewer and tester before choosing the design."
    return SCRIPT.get((agent, turn.round), "NO_REPLY")


def _openai_runtime(settings: Settings) -> dict[str, Any] | None:
    if not settings.openai_base_url:
        return None
    return {
        "kind": "openai",
        "base_url": settings.openai_base_url,
        "api_key": settings.openai_api_key or "none",
        "model": settings.openai_model or "gpt-4o-mini",
        "timeout_s": 120,
    }


def _free_port(preferred: int) -> int:
    """``preferred`` when it is free (0: none preferred), else a free port the system picks."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
            return int(sock.getsockname()[1])
        except OSError:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])


class Demo:
    """The scenario, driven over HTTP against the running hub."""

    def __init__(self, url: str, operator_token: str, home: Path, settings: Settings) -> None:
        self.url = url
        self.home = home
        self.settings = settings
        self.op = httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {operator_token}"}, timeout=60
        )
        self.tokens: dict[str, str] = {}
        self.work: dict[str, str] = {}
        self.clients: dict[str, httpx.AsyncClient] = {}

    async def close(self) -> None:
        await self.op.aclose()
        for client in self.clients.values():
            await client.aclose()

    async def call(self, client: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
        response = await client.request(method, path, **kw)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path} -> {response.status_code}: {response.text}")
        return response.json() if response.content else None

    def step(self, title: str) -> None:
        console.rule(f"[bold]{title}")

    async def create_agents(self) -> str:
        runtime = _openai_runtime(self.settings)
        label = (
            f"openai-compatible model {runtime['model']} at {runtime['base_url']}"
            if runtime
            else "the scripted runtime (no PARLEY_OPENAI_BASE_URL configured; replies are "
            "scripted and labelled 'scripted')"
        )
        self.step("1. Agents (each gets a token and a work channel)")
        table = Table("agent", "role", "work channel", "runtime")
        (self.home / "workspaces").mkdir(mode=0o700, exist_ok=True)
        for agent_id, persona in AGENTS.items():
            # The hub creates each agent's workspace (0700) inside this directory.
            workspace = self.home / "workspaces" / agent_id
            spec: dict[str, Any] = {
                "id": agent_id,
                "persona": persona,
                "workspace": str(workspace),
                "runtime": runtime or {"kind": "scripted"},
                # Agents consent to nobody by default: the demo's team lets each other add
                # them to the discussion planner opens.
                "accepts_channels_from": [a for a in AGENTS if a != agent_id],
            }
            created = await self.call(self.op, "POST", "/v1/agents", json=spec)
            self.tokens[agent_id] = created["token"]
            self.work[agent_id] = created["work_channel_id"]
            self.clients[agent_id] = httpx.AsyncClient(
                base_url=self.url,
                headers={"Authorization": f"Bearer {created['token']}"},
                timeout=60,
            )
            table.add_row(agent_id, persona, created["work_channel_id"], spec["runtime"]["kind"])
        console.print(table)
        console.print(f"Agents answer through {label}.")
        return label

    async def mail(self) -> None:
        self.step("2. Durable mail: send, read, report, blocker copied to the operator")
        planner, reviewer = self.clients["planner"], self.clients["reviewer"]
        task = await self.call(
            planner,
            "POST",
            "/v1/mail",
            json={
                "to": "reviewer",
                "kind": "task",
                "subject": "Review the ingest queue constraints",
                "body": "List the failure modes a job queue for ingest must survive.",
                "labels": ["wave:W1"],
                "idempotency_key": "demo-task-1",
            },
        )
        again = await self.call(
            planner,
            "POST",
            "/v1/mail",
            json={"to": "reviewer", "kind": "task", "idempotency_key": "demo-task-1"},
        )
        console.print(
            f"planner → reviewer [task] {task['subject']!r} id={task['id']} "
            f"(resend with the same idempotency key returned the same id: "
            f"{again['id'] == task['id']})"
        )
        inbox = await self.call(reviewer, "GET", "/v1/agents/reviewer/inbox")
        console.print(f"reviewer's inbox: {[m['subject'] for m in inbox]}")
        await self.call(reviewer, "POST", f"/v1/mail/{task['id']}/status", json={"status": "read"})
        report = await self.call(
            reviewer,
            "POST",
            "/v1/mail",
            json={
                "to": "planner",
                "kind": "report",
                "subject": "Failure modes",
                "body": "Starvation under bursts; duplicate execution after a worker crash.",
                "parent_message_id": task["id"],
                "related": [task["id"]],
            },
        )
        await self.call(
            reviewer,
            "POST",
            f"/v1/mail/{task['id']}/archive",
            json={"label": "W1"},
        )
        blocker = await self.call(
            self.clients["tester"],
            "POST",
            "/v1/mail",
            json={
                "to": "planner",
                "kind": "blocker",
                "subject": "No staging database for the burst test",
            },
        )
        forbidden = await self.clients["tester"].get("/v1/agents/planner/inbox")
        console.print(
            f"reviewer → planner [report] {report['subject']!r} (reply to the task); the task "
            "is archived under W1"
        )
        console.print(
            f"tester → planner [blocker] {blocker['subject']!r}: also copied to the operator"
        )
        console.print(
            f"tester reading planner's inbox → {forbidden.status_code} {forbidden.json()['code']}"
        )
        summary = Table("inbox", "unread", "in progress", "open blockers")
        for who in ("planner", "reviewer", "operator"):
            s = await self.call(self.op, "GET", f"/v1/agents/{who}/summary")
            summary.add_row(who, str(s["unread"]), str(s["in_progress"]), str(s["open_blockers"]))
        console.print(summary)

    async def follow(
        self, channel_id: str, *, until_task: str | None, title: str, after_seq: int = 0
    ) -> None:
        """Print a channel live from its SSE stream until the given task finishes."""
        console.print(f"[dim]— live transcript of {title} —[/dim]")
        headers = {"Authorization": f"Bearer {self.op.headers['Authorization'][7:]}"}
        async with (
            httpx.AsyncClient(base_url=self.url, headers=headers, timeout=None) as client,
            client.stream(
                "GET", f"/v1/channels/{channel_id}/stream", params={"last_id": str(after_seq)}
            ) as response,
        ):
            event = ""
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data = json.loads(line[5:])
                    if event == "message":
                        _print_message(data)
                    elif (
                        event == "task"
                        and data["status"] == "finished"
                        and (until_task is None or data["id"] == until_task)
                    ):
                        console.print(
                            f"[dim]task {data['id']} ended: {data['end_reason']} "
                            f"(rounds run {data['current_round']}/{data['rounds']}, "
                            f"{data['accepted']} replies)[/dim]"
                        )
                        return

    async def discussion(self) -> None:
        if self.settings.openai_base_url:
            await self.agents_discuss()
            return
        self.step("3. The operator gives planner a task in its work channel (wakes planner)")
        posted = await self.call(
            self.op, "POST", f"/v1/channels/{self.work['planner']}/messages", json={"content": TASK}
        )
        await self.follow(self.work["planner"], until_task=posted["task_id"], title="planner/work")

        self.step("4. planner opens a moderated discussion that reports back to its work channel")
        created = await self.call(
            self.clients["planner"],
            "POST",
            "/v1/channels/private",
            json={
                "name": "queue-design",
                "members": ["reviewer", "tester"],
                "callbackChannelId": self.work["planner"],
                "discussGuide": GUIDE,
            },
        )
        channel_id = created["id"]
        tasks = await self.call(self.op, "GET", f"/v1/channels/{channel_id}/tasks")
        await self.follow(channel_id, until_task=tasks[-1]["id"], title="queue-design")

        self.step("5. planner writes its summary and calls back; the discussion closes")
        messages = await self.call(self.op, "GET", f"/v1/channels/{channel_id}/messages")
        summary = self.home / "workspaces" / "planner" / "queue-design-summary.md"
        lines = [f"# Summary: queue design\n\nGuide: {GUIDE}\n"]
        lines += [
            f"- **{m['sender_id']}** (round {m['round']}): {m['content']}"
            for m in messages
            if m["sender_kind"] == "agent"
        ]
        summary.write_text("\n".join(lines) + "\n")
        refused = await self.clients["reviewer"].post(
            f"/v1/channels/{channel_id}/callback", json={"summaryPath": str(summary)}
        )
        console.print(
            f"reviewer tries to call back → {refused.status_code} {refused.json()['code']} "
            "(only the initiator may finish)"
        )
        escape = await self.clients["planner"].post(
            f"/v1/channels/{channel_id}/callback", json={"summaryPath": "../../../etc/passwd"}
        )
        console.print(
            f"planner passes a path outside its workspace → {escape.status_code} "
            f"{escape.json()['code']}"
        )
        before = await self.call(self.op, "GET", f"/v1/channels/{self.work['planner']}/tasks")
        seen = await self.call(
            self.op, "GET", f"/v1/channels/{self.work['planner']}/messages?latest=1"
        )
        done = await self.call(
            self.clients["planner"],
            "POST",
            f"/v1/channels/{channel_id}/callback",
            json={"summaryPath": "queue-design-summary.md"},
        )
        meta = done["metadata"]
        console.print(
            f"callback accepted: status={meta['status']} summaryPath={meta['summaryPath']}"
        )

        self.step("6. The result-ready message wakes planner's session in its work channel")
        after = await self.call(self.op, "GET", f"/v1/channels/{self.work['planner']}/tasks")
        wake = [t for t in after if t["id"] not in {b["id"] for b in before}]
        await self.follow(
            self.work["planner"],
            until_task=wake[-1]["id"] if wake else None,
            title="planner/work",
            after_seq=seen[-1]["seq"],
        )
        late = await self.call(
            self.op, "POST", f"/v1/channels/{channel_id}/messages", json={"content": "One more?"}
        )
        closed = await self.call(
            self.op, "GET", f"/v1/channels/{channel_id}/messages?after_seq={late['message']['seq']}"
        )
        console.print(
            f"a late message in the closed discussion is answered only by: "
            f"{closed[0]['content'].splitlines()[0] if closed else '(nothing)'}"
        )

    async def agents_discuss(self) -> None:
        """The same scenario with agents that use the hub's tools: the demo only gives the task,
        asks planner to finish once the rounds are over, and shows what the agents did."""
        work = self.work["planner"]
        self.step("3. The operator gives planner a task in its work channel (wakes planner)")
        posted = await self.call(
            self.op, "POST", f"/v1/channels/{work}/messages", json={"content": TOOL_TASK}
        )
        await self.show_task(work, posted["task_id"], "planner/work")

        self.step("4. planner opened a moderated discussion itself (create_private_channel)")
        channels = await self.call(self.op, "GET", "/v1/channels")
        opened = [
            c
            for c in channels
            if c["kind"] == "discussion" and c["metadata"].get("initiatorAgentId") == "planner"
        ]
        if not opened:
            raise RuntimeError(
                "planner did not open a discussion with create_private_channel; check that the "
                "model at PARLEY_OPENAI_BASE_URL supports function calling"
            )
        channel_id = opened[-1]["id"]
        console.print(f"discussion {opened[-1]['name']!r} ({channel_id}) opened by planner")
        tasks = await self.call(self.op, "GET", f"/v1/channels/{channel_id}/tasks")
        await self.show_task(channel_id, tasks[0]["id"], opened[-1]["name"])

        self.step("5. planner writes its summary (write_file) and calls back (discuss_callback)")
        refused = await self.clients["reviewer"].post(
            f"/v1/channels/{channel_id}/callback", json={"summaryPath": SUMMARY_FILE}
        )
        console.print(
            f"reviewer tries to call back → {refused.status_code} {refused.json()['code']} "
            "(only the initiator may finish)"
        )
        before = await self.call(self.op, "GET", f"/v1/channels/{work}/tasks")
        seen = await self.call(self.op, "GET", f"/v1/channels/{work}/messages?latest=1")
        asked = await self.call(
            self.op, "POST", f"/v1/channels/{channel_id}/messages", json={"content": FINISH}
        )
        await self.show_task(
            channel_id, asked["task_id"], opened[-1]["name"], asked["message"]["seq"] - 1
        )
        meta = (await self.call(self.op, "GET", f"/v1/channels/{channel_id}"))["metadata"]
        if meta.get("status") == "active":
            raise RuntimeError("planner did not call discuss_callback; the discussion is open")
        console.print(
            f"callback accepted: status={meta['status']} summaryPath={meta['summaryPath']}"
        )
        events = await self.call(self.op, "GET", "/v1/events?type=agent.tool_called&limit=1000")
        done = [
            f"{e['actor']}:{e['payload']['tool']}{'' if e['payload']['ok'] else ' (refused)'}"
            for e in events
        ]
        console.print(f"tool calls made by the agents: {', '.join(done)}")

        self.step("6. The result-ready message wakes planner's session in its work channel")
        after = await self.call(self.op, "GET", f"/v1/channels/{work}/tasks")
        wake = [t for t in after if t["id"] not in {b["id"] for b in before}]
        if wake:
            await self.show_task(work, wake[-1]["id"], "planner/work", seen[-1]["seq"])

    async def show_task(
        self, channel_id: str, task_id: str, title: str, after_seq: int = 0
    ) -> None:
        """Wait for a task, then print its channel's transcript after ``after_seq``. Agents with
        tools start tasks of their own, which may end before the demo could subscribe."""
        console.print(f"[dim]— transcript of {title} —[/dim]")
        while True:
            task = await self.call(self.op, "GET", f"/v1/tasks/{task_id}")
            if task["status"] == "finished":
                break
            await asyncio.sleep(0.2)
        path = f"/v1/channels/{channel_id}/messages?after_seq={after_seq}"
        for message in await self.call(self.op, "GET", path):
            _print_message(message)
        console.print(
            f"[dim]task {task['id']} ended: {task['end_reason']} (rounds run "
            f"{task['current_round']}/{task['rounds']}, {task['accepted']} replies)[/dim]"
        )

    async def wrap_up(self) -> None:
        self.step("9. Everything above is in the event log")
        events = await self.call(self.op, "GET", "/v1/events?limit=1000")
        counts: dict[str, int] = {}
        for event in events:
            counts[event["type"]] = counts.get(event["type"], 0) + 1
        table = Table("event type", "count")
        for kind, count in sorted(counts.items()):
            table.add_row(kind, str(count))
        console.print(table)


def _print_message(data: dict[str, Any]) -> None:
    kind = data["sender_kind"]
    route = data.get("metadata", {}).get("model_route")
    tag = f" [dim]({route})[/dim]" if route else ""
    round_ = f" r{data['round']}" if data.get("round") else ""
    colour = {"moderator": "magenta", "human": "cyan", "system": "yellow"}.get(kind, "green")
    text = data["content"]
    if kind == "moderator":
        text = text.splitlines()[0] + " …"
    console.print(f"[{colour}]{data['sender_id']}{round_}[/{colour}]{tag}: {text}")


@contextlib.asynccontextmanager
async def _serving(
    settings: Settings, port: int, script: MeetingScript, workers: WorkersScript
) -> AsyncIterator[tuple[str, Any, WebSessions]]:
    runtimes = StaticRuntimes(fallback=default_runtimes())
    hub = build_hub(settings, runtimes=runtimes)
    await hub.start()
    if settings.openai_base_url is None:
        # Each agent its own scripted runtime (its own model route), as members of a meeting
        # each speak with their own model (R11).
        for agent in AGENTS:
            voice = ScriptedVoice(agent, script, _scripted_reply)
            runtimes.set(agent, WorkerVoice(agent, workers, voice))
    app = create_app(hub=hub)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serve_task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serve_task.done():
                serve_task.result()
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}", hub, app.state.web_sessions
    finally:
        server.should_exit = True
        await serve_task
        await hub.stop()


async def _run(home: Path, exit_after: bool, port: int) -> None:
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    settings = Settings(home=home)
    script, workers = MeetingScript(), WorkersScript()
    chosen = _free_port(port)
    if port and chosen != port:
        console.print(
            f"[yellow]port {port} is taken: the demo's hub listens on {chosen} instead "
            "(set PARLEY_PORT to choose one)[/yellow]"
        )
    async with _serving(settings, chosen, script, workers) as (url, hub, web):
        write_hub_info(home, url)
        token = hub.operator_token
        assert token is not None
        token_path = write_operator_token(home, token)
        console.print(
            Panel(
                f"parley hub at [bold]{url}[/bold] · SQLite store in {home}\n"
                f"operator token stored in {token_path}",
                title="parley demo",
            )
        )
        demo = Demo(url, token, home, settings)
        try:
            await demo.create_agents()
            await demo.mail()
            await demo.discussion()
            await MeetingScene(demo, script, console).run()
            await WorkersScene(demo, hub, workers, console).run()
            await demo.wrap_up()
        finally:
            await demo.close()
        console.rule("[bold green]demo complete")
        if exit_after:
            return
        # A one-time code, never the token, in the link: it signs one browser in, once.
        code = web.issue_code(hash_token(token), ttl_s=SIGN_IN_LINK_TTL_S)
        console.print(
            f"Web UI: {url}/ui/\n"
            f"Sign in as the operator (this link works once, for "
            f"{SIGN_IN_LINK_TTL_S // 60:.0f} minutes): {url}/ui/signin/link?key={code}",
            soft_wrap=True,  # a link broken over two lines does not open
        )
        # The demo's data root is its own (``<data root>/demo``): every hint names it, and the
        # parley being run by its absolute path, so each works pasted into any shell.
        parley = shlex.join([parley_executable(), "--home", str(home)])
        console.print(
            f"The hub keeps running at {url} with the demo's data in {home} (its own data "
            "root: other parley commands need --home to reach it). Try:\n"
            f"  {parley} agent list\n"
            f"  {parley} mail inbox operator\n"
            f"  {parley} channel list\n"
            f"  {parley} room list\n"
            f"  {parley} worker list\n"
            "Press Ctrl+C to stop.",
            soft_wrap=True,  # a command broken over two lines does not paste
        )
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()


def run_demo(home: Path | None, url: str | None = None, exit_after: bool = False) -> None:
    """Run the demo in ``<data root>/demo`` (wiped first); ``url`` is unused — the demo always
    starts its own hub so it never touches a hub you run."""
    demo_home = resolve_home(home) / "demo"
    os.umask(PRIVATE_UMASK)  # as ``parley serve``: what the demo's hub writes is private
    # The port as ``parley serve`` reads it: PARLEY_PORT, else 8765.
    port = int(os.environ.get("PARLEY_PORT") or DEFAULT_PORT)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run(demo_home, exit_after, port))
