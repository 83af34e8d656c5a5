"""Meeting rooms through the real ``parley`` CLI against a real ``parley serve`` process: a room
created and joined, a meeting convened and watched live to its end with a human's post and each
member's own minutes, the emergency stop, the light path, and refusals that print the hub's
error code.

A remote member (its turns taken over the REST API by the test, as a remote agent would) holds
the meeting at its turn, so the human's post lands while the meeting runs, without any sleep.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.acceptance.cli_support import Cli, ServedHub
from tests.acceptance.test_cli_channels import json_lines, scripted, watcher

WAIT_S = 60


def next_turn(hub: ServedHub, token: str) -> dict[str, Any]:
    """The remote agent's next pending turn (long poll)."""
    response = httpx.get(
        f"{hub.url}/v1/turns/next",
        params={"timeout_s": WAIT_S},
        headers={"Authorization": f"Bearer {token}"},
        timeout=WAIT_S + 10,
    )
    assert response.status_code == 200, response.text
    turn: dict[str, Any] = response.json()
    return turn


def answer(hub: ServedHub, token: str, turn_id: str, text: str | None) -> None:
    """Speak ``text`` for a pending turn, or pass it (NO_REPLY) when ``text`` is None."""
    path = f"/v1/turns/{turn_id}/" + ("no_reply" if text is None else "speak")
    response = httpx.post(
        f"{hub.url}{path}",
        json=None if text is None else {"text": text},
        headers={"Authorization": f"Bearer {token}"},
        timeout=WAIT_S,
    )
    assert response.status_code == 200, response.text


def settle(cli: Cli, *work_channels: str) -> None:
    """Wait for the turns running in these channels to end (``channel watch --no-follow`` returns
    when the tasks it found running have finished)."""
    for channel_id in work_channels:
        cli.ok("channel", "watch", channel_id, "--no-follow", "--latest", "0", "--json")


def states(cli: Cli, room_id: str) -> dict[str, str]:
    return {m["agent_id"]: m["state"] for m in cli.json("room", "members", room_id)}


def work_channel(cli: Cli, agent_id: str) -> str:
    return str(cli.json("agent", "show", agent_id)["work_channel_id"])


def test_a_meeting_convened_and_watched_to_its_end_with_a_human_post(
    cli: Cli, hub: ServedHub
) -> None:
    alice = scripted(
        cli,
        "alice",
        [
            "The cache layer is ready; I need the key rotation date from rita.",
            "alice's minutes: rita rotates the keys on Monday; I ship the cache after that.",
            "alice read her minutes",
        ],
    )
    rita = cli.json("agent", "add", "rita", "--runtime", "remote")
    room = cli.json("room", "create", "release", "--max-rounds", "1")
    assert (room["name"], room["config"]["max_rounds"]) == ("release", 1)
    joined = cli.json("room", "join", room["id"], token=alice)  # alice joins by herself
    assert (joined["agent_id"], joined["state"]) == ("alice", "idle-waiting")
    cli.json("room", "join", room["id"], "rita")  # the operator adds rita
    cli.json("room", "done", token=alice)

    proc, lines = watcher(hub, "room", "convene", room["id"], "--topic", "Release plan", "--watch")
    try:
        lines.wait_for(lambda line: "alice (scripted): The cache layer is ready" in line, WAIT_S)
        [meeting] = cli.json("room", "meetings", room["id"])
        assert (meeting["status"], meeting["present"]) == ("running", ["alice", "rita"])
        posted = cli.ok("room", "post", meeting["id"], "Freeze is on Friday, keep it short.")
        assert f"into meeting {meeting['id']}" in posted.stdout
        lines.wait_for(lambda line: "operator (human): Freeze is on Friday" in line, WAIT_S)

        speech = next_turn(hub, rita["token"])
        assert speech["channel_id"] == meeting["channel_id"]
        assert "Release plan" in speech["prompt"]["text"]
        answer(hub, rita["token"], speech["id"], "Keys rotate on Monday; alice can ship after.")
        lines.wait_for(lambda line: "rita (remote · remote:rita): Keys rotate" in line, WAIT_S)
        minutes = next_turn(hub, rita["token"])
        assert "Write YOUR minutes" in minutes["prompt"]["text"]
        answer(hub, rita["token"], minutes["id"], "rita's minutes: rotate the keys on Monday.")
        assert proc.wait(WAIT_S) == 0, proc.stderr.read() if proc.stderr else ""
        out = lines.until_end(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    # The live view: topic, round x/y and roster, the transcript with voices, the end.
    assert "topic: Release plan" in out
    assert "round 1/1 · present: alice, rita" in out
    assert "[r1] alice (scripted): The cache layer is ready" in out
    assert "meeting ended: round_cap · 2 speeches · round 1/1 · present: alice, rita" in out
    assert "minutes: alice (delivered), rita (delivered)" in out

    # Her minutes woke rita in her work channel: she passes, and everyone's turns end.
    wake = next_turn(hub, rita["token"])
    assert "rotate the keys on Monday" in wake["prompt"]["text"]
    answer(hub, rita["token"], wake["id"], None)
    settle(cli, rita["principal"]["work_channel_id"], work_channel(cli, "alice"))
    # Dismissal restored each member's state: alice had marked her work done, rita was idle.
    assert states(cli, room["id"]) == {"alice": "done", "rita": "idle-waiting"}

    # The whole meeting again, as JSON lines: an ended meeting is shown at once.
    events = json_lines(cli.ok("room", "watch", meeting["id"], "--json").stdout)
    said = [(e["data"]["sender_id"], e["data"]["sender_kind"]) for e in events[:-1]]
    assert said == [
        ("moderator", "moderator"),
        ("alice", "agent"),
        ("operator", "human"),
        ("rita", "agent"),
        ("system", "system"),
    ]
    final = events[-1]
    assert final["event"] == "meeting"
    assert (final["data"]["status"], final["data"]["end_reason"]) == ("ended", "round_cap")

    shown = cli.json("room", "meeting", meeting["id"])
    assert [
        (s["agent_id"], s["outcome"], s["runtime"], s["model_route"]) for s in shown["speeches"]
    ] == [
        ("alice", "accepted", "scripted", "scripted"),
        ("rita", "accepted", "remote", "remote:rita"),
    ]
    written = {m["agent_id"]: m["text"] for m in cli.json("room", "minutes", meeting["id"])}
    assert written == {
        "alice": "alice's minutes: rita rotates the keys on Monday; I ship the cache after that.",
        "rita": "rita's minutes: rotate the keys on Monday.",
    }
    # An agent sees only its own minutes.
    assert [m["agent_id"] for m in cli.json("room", "minutes", meeting["id"], token=alice)] == [
        "alice"
    ]
    readable = cli.ok("room", "minutes", meeting["id"]).stdout
    assert "rita's minutes: rotate the keys on Monday." in readable
    transcript = cli.ok("room", "transcript", meeting["id"]).stdout
    assert "operator (human): Freeze is on Friday, keep it short." in transcript


def test_the_emergency_stop_ends_the_meeting_and_its_watch(cli: Cli, hub: ServedHub) -> None:
    scripted(cli, "alice", [{"hang": True}], timeout_s=300)  # only the stop ends her speech
    bob = scripted(cli, "bob", ["bob has nothing to add"])
    room = cli.json("room", "create", "incident")
    cli.json("room", "join", room["id"], "alice")
    cli.json("room", "join", room["id"], token=bob)
    meeting = cli.json("room", "convene", room["id"], "--topic", "Incident review")
    assert (meeting["status"], meeting["present"]) == ("running", ["alice", "bob"])

    proc, lines = watcher(hub, "room", "watch", meeting["id"], "--json")
    try:
        lines.wait_for(lambda line: "[Meeting convened by operator]" in line, WAIT_S)
        cli.ok("room", "post", meeting["id"], "Status, anyone?")
        lines.wait_for(lambda line: "Status, anyone?" in line, WAIT_S)
        # While it runs: agents do not post, nobody convenes again, members cannot leave.
        cli.fails("room", "post", meeting["id"], "me too", token=bob,
                  code="meeting_post_humans_only")  # fmt: skip
        cli.fails("room", "convene", room["id"], "--topic", "again",
                  code="meeting_already_running")  # fmt: skip
        cli.fails("room", "leave", room["id"], token=bob, code="member_in_meeting")
        assert states(cli, room["id"]) == {"alice": "in-meeting", "bob": "in-meeting"}

        stopped = cli.json("room", "stop")
        assert [(m["id"], m["status"], m["end_reason"]) for m in stopped] == [
            (meeting["id"], "ended", "stopped")
        ]
        assert proc.wait(WAIT_S) == 0, proc.stderr.read() if proc.stderr else ""
        lines.until_end(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = [json.loads(line) for line in lines.lines]
    assert events[-1]["event"] == "meeting"
    assert events[-1]["data"]["end_reason"] == "stopped"
    spoken = [e["data"]["content"] for e in events if e["event"] == "message"]
    assert "Status, anyone?" in spoken
    assert spoken[-1].startswith("[Meeting stopped]")

    cli.fails("room", "post", meeting["id"], "too late", code="meeting_ended")
    assert states(cli, room["id"]) == {"alice": "idle-waiting", "bob": "idle-waiting"}
    assert "no meeting you may stop was running" in cli.ok("room", "stop").stdout
    cli.ok("room", "leave", room["id"], token=bob)
    assert states(cli, room["id"]) == {"alice": "idle-waiting"}


def test_membership_briefs_done_pulse_and_refusals(cli: Cli) -> None:
    alice = scripted(cli, "alice", ["ok"], cycle=True)
    bob = scripted(cli, "bob", ["ok"], cycle=True)
    carol = cli.json("agent", "add", "carol")["token"]
    room = cli.json(
        "room", "create", "ops", "--speech-limit", "500",
        "--config-json", '{"brief_max_chars": 60, "speech_limit": 9000}',
    )  # fmt: skip
    assert (room["config"]["speech_limit"], room["config"]["brief_max_chars"]) == (500, 60)
    other = cli.json("room", "create", "other")
    cli.json("room", "join", room["id"], token=alice)
    cli.json("room", "join", room["id"], "bob")

    # Refusals print the hub's code and exit 1.
    cli.fails("room", "join", other["id"], token=alice, code="room_membership_exclusive")
    cli.fails("room", "join", other["id"], "carol", token=bob, code="room_join_forbidden")
    cli.fails("room", "convene", room["id"], "--topic", "x", token=carol,
              code="not_a_room_member")  # fmt: skip
    cli.fails("room", "show", room["id"], token=carol, code="not_a_room_member")
    cli.fails("room", "convene", room["id"], "--topic", "x", "--member", "carol",
              code="summon_non_member")  # fmt: skip
    cli.fails("room", "show", "room-nope", code="room_not_found")
    cli.fails("room", "meeting", "mtg-nope", code="meeting_not_found")
    cli.fails("room", "brief", "x" * 61, token=alice, code="brief_too_long")
    cli.fails("room", "brief", "hello", token=carol, code="not_a_room_member")
    paid = '{"moderator_runtime": {"kind": "openai"}}'
    cli.fails("room", "create", "paid", "--config-json", paid, token=alice, code="operator_only")
    usage = cli.run("room", "join", room["id"])  # the operator must name the agent
    assert usage.returncode == 2 and "name the agent to add" in usage.stderr
    assert cli.run("room", "create", "x", "--config-json", "[1]").returncode == 2

    # An agent sees only its own room; the operator sees both.
    assert [r["id"] for r in cli.json("room", "list", token=alice)] == [room["id"]]
    assert {r["id"] for r in cli.json("room", "list")} == {room["id"], other["id"]}

    brief = cli.json("room", "brief", "cache warm; next: eviction", token=alice)
    assert brief["room_id"] == room["id"]
    board = cli.json("room", "board", room["id"])
    assert [(b["agent_id"], b["text"]) for b in board] == [("alice", "cache warm; next: eviction")]
    assert "cache warm; next: eviction" in cli.ok("room", "board", room["id"]).stdout

    assert cli.json("room", "done", token=bob)["state"] == "done"
    assert states(cli, room["id"]) == {"alice": "idle-waiting", "bob": "done"}
    assert cli.json("room", "done", "--undo", token=bob)["state"] == "idle-waiting"

    first = cli.json("room", "pulse", room["id"])
    assert (first["conclusion"], first["escalated"], first["logged"]) == ("ok", False, True)
    assert first["summary"] == "- alice:\n> cache warm; next: eviction"
    again = cli.json("room", "pulse", room["id"])
    assert again["logged"] is False  # the log changes only when the conclusion does
    log = cli.json("room", "pulse", room["id"], "--log")
    assert [(e["conclusion"], e["escalated"]) for e in log] == [("ok", False)]
    assert "conclusion unchanged" in cli.ok("room", "pulse", room["id"]).stdout

    shown = cli.ok("room", "show", room["id"]).stdout
    assert "ops" in shown and "alice" in shown and "idle-waiting" in shown
    cli.ok("room", "leave", room["id"], "bob")
    assert states(cli, room["id"]) == {"alice": "idle-waiting"}
    assert cli.json("room", "meetings", room["id"]) == []
