"""The turn timeline's list of parts names only the parts that took time, joined by " · "
with none dangling: a turn whose last part (the commit) took 0 ms ends with its last timed part."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from parley.surfaces.web.render import fragment
from parley.surfaces.web.timeline import PARTS, bars


@dataclass(frozen=True)
class Turn:
    id: str
    created: datetime
    timings: dict[str, float] | None = field(default_factory=dict)
    round: int = 1
    agent_id: str = "alice"
    outcome: str = "accepted"


def parts_text(timings: dict[str, float]) -> str:
    found, axis = bars([Turn("t1", datetime(2026, 1, 1, tzinfo=UTC), timings)])
    html = fragment("_timeline.html", bars=found, axis_ms=axis, parts=PARTS, viewer=None)
    [listed] = re.findall(r'<span class="parts">(.*?)</span>\s*\n', html, re.S)
    return re.sub(r"<[^>]+>", "", listed)


def test_a_part_of_zero_ms_leaves_no_dangling_separator() -> None:
    text = parts_text({"queue_ms": 2.0, "provider_wait_ms": 40.0, "persist_ms": 0.0})
    assert not text.rstrip().endswith("·"), text
    assert text.count("·") == 1 and "ms" in text


def test_every_timed_part_is_listed_once() -> None:
    timings = {"queue_ms": 1.0, "prompt_build_ms": 2.0, "provider_wait_ms": 3.0, "persist_ms": 4.0}
    assert parts_text(timings).count("·") == 3
