"""Credentials a CLI turn reaches the hub with: a token that means "this agent, in this turn".

A command-line agent (Claude Code, Codex) calls the hub's tools over MCP from inside its turn.
Its own agent token would make such a call anonymous as to where it comes from: the hub could
not tell which worker "the worker of the turn you are in" is. So each turn of such an agent is
given a token of its own, which the hub binds to the turn's agent, channel and logical session
for as long as a turn of that session runs on this hub, and forgets when the turn ends: the
same call then means over MCP what it means through function calling.

The token is derived from a secret this hub draws at start and the logical session, so every
turn of one session gets the same token: a Claude Code process kept alive between turns was
given its MCP configuration when it started, and keeps it. Between turns, after the hub
restarts, or on another hub, the token is refused as unknown; a rotation of the agent's tokens
ends it at once, and for good: the agent's later turns are given tokens of their own (a token
that leaked before a rotation does not come back with the session's next turn).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from parley.core.identity import hash_token

TOKEN_PREFIX = "ptt_"
"""Turn tokens read differently from agent tokens (``pt_``) in a config file or a log."""


@dataclass(frozen=True)
class TurnBinding:
    """Where a turn token's calls come from."""

    principal_id: str
    channel_id: str
    session_id: str


class TurnAccess:
    """The turn tokens of this hub's running turns, by digest."""

    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)
        # digest -> (binding, how many turns hold it): turns of one session may overlap for
        # the moment a superseded turn takes to unwind.
        self._live: dict[str, tuple[TurnBinding, int]] = {}
        # principal -> how many times its turn tokens were ended (a rotation): part of what a
        # token is derived from, so a token ended once is never given out again.
        self._generations: dict[str, int] = {}
        self.mcp_url: str | None = None
        """This hub's MCP endpoint as a process on its machine reaches it (``http://…/mcp``);
        set once the hub listens. Without it no turn is given credentials."""

    def token_for(self, binding: TurnBinding) -> str:
        generation = self._generations.get(binding.principal_id, 0)
        key = (
            f"{binding.principal_id}\0{binding.channel_id}\0{binding.session_id}\0{generation}"
        ).encode()
        return TOKEN_PREFIX + hmac.new(self._secret, key, hashlib.sha256).hexdigest()

    @contextmanager
    def open(self, binding: TurnBinding) -> Iterator[str]:
        """The turn's token, valid until the block ends (and no other turn of the session
        holds it)."""
        token = self.token_for(binding)
        digest = hash_token(token)
        _, holders = self._live.get(digest, (binding, 0))
        self._live[digest] = (binding, holders + 1)
        try:
            yield token
        finally:
            held = self._live.get(digest)
            if held is not None:
                if held[1] <= 1:
                    del self._live[digest]
                else:
                    self._live[digest] = (held[0], held[1] - 1)

    def binding(self, digest: str) -> TurnBinding | None:
        """The turn a token (by its digest) belongs to, while that turn runs."""
        held = self._live.get(digest)
        return held[0] if held is not None else None

    def end_principal(self, principal_id: str) -> None:
        """Forget every turn token of a principal (its tokens were rotated), and never derive
        them again."""
        self._generations[principal_id] = self._generations.get(principal_id, 0) + 1
        self._live = {d: h for d, h in self._live.items() if h[0].principal_id != principal_id}

    def live_count(self) -> int:
        return len(self._live)
