"""The record of a process a runtime runs for a turn or a session (a command-line agent).

Each one is started under a supervisor that ends every process below it when the agent exits,
is stopped, or its hub dies. The record is the second line: a hub that starts, or takes over a
dead hub's work, ends what a dead hub's records still name on its machine (a supervisor that
was itself killed), and says so in an event.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

OWNER_ENV = "PARLEY_PROCESS_OWNER"
"""Set to the owning hub's id in the environment of the agent and so of every process it
starts: what finds a dead hub's processes whose supervisor is gone too."""


class RuntimeProcess(BaseModel):
    """One live supervised process: the supervisor's pid (the leader of the process group
    ``pgid``) and its start time, so that a pid the system gave to another process since is
    never taken for it; the agent's pid below it; the hub that owns it and that hub's machine."""

    id: str
    hub_id: str
    host: str
    pid: int
    pgid: int
    start_time: float
    agent_pid: int
    command: str
    created: datetime
