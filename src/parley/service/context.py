"""What every service needs: the ports and the settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from parley.core.ports import Bus, Clock, Store, Workspace
from parley.core.settings import HubSettings
from parley.service.events import EventLog
from parley.service.metrics import HubMetrics
from parley.service.quotas import SendQuotas
from parley.service.usage import UsageLedger


@dataclass
class ServiceContext:
    store: Store
    bus: Bus
    clock: Clock
    settings: HubSettings
    events: EventLog
    workspace: Workspace
    quotas: SendQuotas = field(init=False)
    metrics: HubMetrics
    usage: UsageLedger = field(init=False)

    def __post_init__(self) -> None:
        # One set of quotas per hub process, shared by every service that stores a sender's text.
        self.quotas = SendQuotas(self.clock, self.settings)
        # One ledger of token and cost usage per hub: every runtime call site records into it.
        self.usage = UsageLedger(self.store, self.clock, self.metrics)
