"""What every service needs: the ports and the settings."""

from __future__ import annotations

from dataclasses import dataclass

from parley.config import Settings
from parley.core.ports import Bus, Clock, Store, Workspace
from parley.service.events import EventLog


@dataclass
class ServiceContext:
    store: Store
    bus: Bus
    clock: Clock
    settings: Settings
    events: EventLog
    workspace: Workspace
