"""``parley status`` (the hub at a glance) and ``parley ui`` (the web UI, signed in once)."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer
from rich.text import Text

from parley.surfaces.cli.client import HubClient
from parley.surfaces.cli.output import JsonFlag, client, console, emit, fields, table

# Open mail statuses: a blocker is open until it is closed.
OPEN_STATUSES = ("pending", "delivered", "read", "in_progress")


def gather(hub: HubClient) -> dict[str, Any]:
    """Everything ``status`` shows, as one JSON object; parts only the operator may read are
    left out for anyone else."""
    cfg = hub.config
    health_status, health = hub.probe("/healthz")
    _, ready = hub.probe("/readyz")
    me = hub.get("/v1/whoami")
    data: dict[str, Any] = {
        "hub": {
            "url": cfg.url,
            "url_from": cfg.url_source,
            "version": health.get("version") if health_status == 200 else None,
        },
        "readiness": ready,
        "you": {"id": me["id"], "kind": me.get("kind"), "role": me.get("role")},
    }
    if me.get("role") != "operator":
        return data
    workers = hub.get("/v1/workers", state=["running", "interrupted", "stale"], limit=1000)
    busy = {w["agent_id"] for w in workers if w.get("state") == "running"}
    agents = []
    for a in hub.get("/v1/agents"):
        summary = hub.get(f"/v1/agents/{a['id']}/summary")
        agents.append(
            {
                "id": a["id"],
                "runtime": (a.get("runtime") or {}).get("kind", "none"),
                "state": agent_state(a, a["id"] in busy),
                "unread": summary.get("unread"),
                "open_blockers": summary.get("open_blockers"),
            }
        )
    data["agents"] = agents
    data["workers"] = [
        {k: w.get(k) for k in ("id", "agent_id", "state", "purpose", "updated")} for w in workers
    ]
    data["tasks"] = running_tasks(hub)
    data["meetings"] = running_meetings(hub)
    data["open_blockers"] = [
        {k: m.get(k) for k in ("id", "from_id", "subject", "status", "created")}
        for m in hub.get(
            f"/v1/agents/{me['id']}/inbox", kind="blocker", status=list(OPEN_STATUSES), limit=100
        )
    ]
    return data


def agent_state(agent: dict[str, Any], working: bool) -> str:
    if not agent.get("active", True):
        return "disabled"
    return "working" if working else "idle"


def running_tasks(hub: HubClient) -> list[dict[str, Any]]:
    """Discussion tasks still running, in every channel that holds discussions."""
    found = []
    for page, _ in hub.pages("/v1/channels"):
        for channel in page:
            if channel.get("kind") not in ("group", "discussion") or channel["status"] != "active":
                continue
            for tasks, _ in hub.pages(f"/v1/channels/{channel['id']}/tasks"):
                found += [
                    {
                        "id": t["id"],
                        "channel": channel.get("name") or channel["id"],
                        "round": f"{t.get('current_round', 0)}/{t.get('rounds')}",
                    }
                    for t in tasks
                    if t.get("status") == "running"
                ]
    return found


def running_meetings(hub: HubClient) -> list[dict[str, Any]]:
    found = []
    for page, _ in hub.pages("/v1/rooms"):
        for room in page:
            for meetings, _ in hub.pages(f"/v1/rooms/{room['id']}/meetings"):
                found += [
                    {
                        "id": m["id"],
                        "room": room.get("name") or room["id"],
                        "topic": m.get("topic"),
                        "round": f"{m.get('round')}/{m.get('max_rounds')}",
                    }
                    for m in meetings
                    if m.get("status") == "running"
                ]
    return found


def render(data: dict[str, Any]) -> None:
    ready = data.get("readiness") or {}
    fields(
        "hub",
        [
            ("url", f"{data['hub']['url']} (from {data['hub']['url_from']})"),
            ("version", data["hub"].get("version")),
            ("readiness", ready.get("status")),
            ("store", f"{ready.get('store')} (storage {ready.get('storage')})"),
            ("you", f"{data['you']['id']} ({data['you'].get('role')})"),
        ],
    )
    if "agents" not in data:
        console.print("[dim]agents, tasks and blockers: the operator's view only[/dim]")
        return
    table(
        "agents",
        ["id", "state", "runtime", "unread", "blockers"],
        [
            (a["id"], a["state"], a["runtime"], a["unread"], a["open_blockers"])
            for a in data["agents"]
        ],
    )
    table(
        "workers at work",
        ["id", "agent", "state", "purpose"],
        [(w["id"], w["agent_id"], w["state"], w["purpose"]) for w in data["workers"]],
    )
    table(
        "running discussions",
        ["task", "channel", "round"],
        [(t["id"], t["channel"], t["round"]) for t in data["tasks"]],
    )
    table(
        "running meetings",
        ["meeting", "room", "round", "topic"],
        [(m["id"], m["room"], m["round"], m["topic"]) for m in data["meetings"]],
    )
    table(
        "open blockers",
        ["id", "from", "status", "subject"],
        [(b["id"], b["from_id"], b["status"], b["subject"]) for b in data["open_blockers"]],
    )


def status(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """The hub at a glance: where it is, its store and readiness; for the operator also every
    agent's state, the workers, discussions and meetings running, and open blockers."""
    emit(ctx, as_json, gather(client(ctx)), render)


def ui(
    ctx: typer.Context,
    open_browser: Annotated[
        bool,
        typer.Option(
            "--open/--no-open", help="Open a browser when one is available (default: yes)."
        ),
    ] = True,
    as_json: JsonFlag = False,
) -> None:
    """Print a link that signs a browser into the web UI as you, once (for ten minutes), and
    open it in a browser when this machine has one."""
    hub = client(ctx)
    issued = hub.post("/v1/ui/signin-links")
    url = hub.config.url + issued["path"]
    opened = open_browser and browser_available() and open_in_browser(url)
    data = {
        "ui": hub.config.url + "/ui/",
        "link": url,
        "expires_in_s": issued["expires_in_s"],
        "opened": opened,
    }

    def show(d: dict[str, Any]) -> None:
        minutes = int(d["expires_in_s"] // 60)
        console.print(Text(f"web UI: {d['ui']}"))
        console.print(
            Text(f"sign in (this link works once, for {minutes} minutes): {d['link']}"),
            soft_wrap=True,  # a link broken over two lines does not open
        )
        if d["opened"]:
            console.print("[dim]opened in your browser[/dim]")

    emit(ctx, as_json, data, show)


def browser_available() -> bool:
    """A browser can be shown: a graphical session (or macOS, Windows) and a browser found."""
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return False
    import webbrowser

    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


def open_in_browser(url: str) -> bool:
    import webbrowser

    return bool(webbrowser.open(url))
