"""``parley agent consent``, ``parley channel invite`` and ``parley invitation …`` against a real
hub: an agent joins another's channel only with its consent."""

from __future__ import annotations

from tests.acceptance.cli_support import Cli


def test_consent_and_invitations_from_the_cli(cli: Cli) -> None:
    alice = cli.json("agent", "add", "alice")["token"]
    bob = cli.json("agent", "add", "bob")["token"]
    carol = cli.json("agent", "add", "carol", "--accept-channels-from", "alice")["token"]

    refused = cli.fails("channel", "create", "--name", "g", "--member", "bob", token=alice,
                        code="membership_consent_required")  # fmt: skip
    # The way out is named as commands, not only as a REST route.
    assert "`parley channel invite <channel> <agent>`" in refused.stderr
    assert "`parley agent consent <agent> --accept-channels-from alice`" in refused.stderr
    group = cli.json("channel", "create", "--name", "g", "--member", "carol", token=alice)
    assert group["members"] == ["alice", "carol"]

    invited = cli.json("channel", "invite", group["id"], "bob", token=alice)
    assert (invited["agent_id"], invited["status"]) == ("bob", "pending")
    listed = cli.json("invitation", "list", token=bob)
    assert [i["id"] for i in listed] == [invited["id"]]
    cli.fails("invitation", "accept", invited["id"], token=carol, code="invitation_not_found")
    accepted = cli.json("invitation", "accept", invited["id"], token=bob)
    assert accepted["status"] == "accepted"
    assert cli.json("channel", "show", group["id"], token=bob)["members"] == [
        "alice",
        "carol",
        "bob",
    ]
    readable = cli.ok("invitation", "list", "--status", "all", token=alice).stdout
    assert invited["id"] in readable and "accepted" in readable

    assert cli.json("agent", "consent", "bob")["accepts_channels_from"] == []
    cli.ok("agent", "consent", "bob", "--accept-channels-from", "*", token=bob)
    assert "accepts channels from *" in cli.ok("agent", "consent", "bob").stdout
    cli.fails("agent", "consent", "bob", "--nobody", token=carol, code="consent_forbidden")
    cli.json("channel", "create", "--name", "h", "--member", "bob", token=carol)
