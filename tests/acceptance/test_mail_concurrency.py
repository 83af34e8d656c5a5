"""Mail under concurrent client processes against a hub process (M6): nothing lost, nothing
duplicated, per sender order preserved, idempotent retries."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import free_port

HERE = Path(__file__).parent
SENDERS = 6
PER_SENDER = 200
START_DEADLINE_S = 60.0
RUN_DEADLINE_S = 300.0


def wait_until_ready(url: str, hub: subprocess.Popen[str]) -> None:
    """Wait for the hub's READY line on stdout (bounded), then check /healthz answers."""
    assert hub.stdout is not None
    deadline = time.monotonic() + START_DEADLINE_S
    with selectors.DefaultSelector() as sel:
        sel.register(hub.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"the hub did not start within {START_DEADLINE_S:g}s")
            if not sel.select(timeout=remaining):
                continue
            line = hub.stdout.readline()
            if not line:
                raise AssertionError(f"the hub exited with {hub.wait()} before it was ready")
            if line.strip() == "READY":
                break
    r = httpx.get(f"{url}/healthz", timeout=10)
    assert r.status_code == 200, r.text


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_concurrent_sender_processes_lose_and_duplicate_nothing(
    tmp_path: Path, database_url: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    log_path = tmp_path / "hub.log"
    log = log_path.open("w")
    hub = subprocess.Popen(
        [
            sys.executable,
            str(HERE / "hub_launcher.py"),
            "--home",
            str(home),
            "--database-url",
            database_url,
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    senders: list[subprocess.Popen[bytes]] = []
    try:
        wait_until_ready(url, hub)
        token = (home / "operator.token").read_text().strip()
        op = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        tokens: dict[str, str] = {}
        for agent_id in ["inbox", *(f"sender-{n}" for n in range(SENDERS))]:
            r = op.post("/v1/agents", json={"id": agent_id})
            assert r.status_code == 201, r.text
            tokens[agent_id] = r.json()["token"]
        names = [f"sender-{n}" for n in range(SENDERS)]
        senders = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "mail_sender.py"),
                    url,
                    tokens[name],
                    name,
                    "inbox",
                    str(PER_SENDER),
                ],
                env=env,
                stdout=subprocess.PIPE,
            )
            for name in names
        ]
        reported: dict[str, list[str]] = {}
        deadline = time.monotonic() + RUN_DEADLINE_S
        for process in senders:
            out, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert process.returncode == 0
            line = json.loads(out.decode().strip().splitlines()[-1])
            assert line["retried"] > 0
            reported[line["sender"]] = line["ids"]

        inbox_client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {tokens['inbox']}"}, timeout=30
        )
        inbox: list[dict[str, Any]] = []
        after = 0
        while True:
            r = inbox_client.get(
                "/v1/agents/inbox/inbox", params={"after_seq": after, "limit": 500}
            )
            assert r.status_code == 200, r.text
            page = r.json()
            if not page:
                break
            inbox += page
            after = int(page[-1]["seq"])
        inbox_client.close()

        assert len(inbox) == SENDERS * PER_SENDER
        assert len({m["id"] for m in inbox}) == len(inbox)
        seqs = [m["seq"] for m in inbox]
        assert seqs == sorted(seqs)
        for name in names:
            mine = [m for m in inbox if m["from_id"] == name]
            assert [m["body"] for m in mine] == [f"{name}:{i}" for i in range(PER_SENDER)]
            assert [m["id"] for m in mine] == reported[name]
        summary = op.get("/v1/agents/inbox/summary").json()
        assert summary["total_open"] == SENDERS * PER_SENDER
        op.close()
    finally:
        for process in senders:
            if process.poll() is None:
                process.kill()
                process.wait()
        stop(hub)
        log.close()
    # uvicorn re-raises the SIGTERM it handled once it has shut down gracefully.
    assert hub.returncode in (0, -signal.SIGTERM)
    assert "Traceback" not in log_path.read_text()
