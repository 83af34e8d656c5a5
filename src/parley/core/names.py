"""Addressing channels and rooms the way people do: by name, or by the first characters of an
id, as well as by the full id. A reference that fits several is refused with the candidates, so
the caller can pick one; one that fits none is left for the route to refuse as unknown."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from parley.core.errors import Conflict

MIN_PREFIX = 4
"""The fewest characters of an id that address it: fewer would match almost anything."""

SHORT_ID = 8
"""How many characters of an id a list shows at least (more where the list needs them)."""

MAX_CANDIDATES = 10
"""How many candidates an ambiguity lists."""


@dataclass(frozen=True)
class Named:
    """Something addressable: its id, its name, and whether it is live (not closed)."""

    id: str
    name: str
    live: bool = True


def id_key(ref: str, id_prefix: str = "") -> str:
    """The id a reference may be the start of: ULIDs are upper case, and a room's id prefix
    (``room-``) may be left out."""
    bare = ref.strip()
    if id_prefix and bare.lower().startswith(id_prefix):
        bare = bare[len(id_prefix) :]
    return id_prefix + bare.upper()


def choose(ref: str, what: str, by_name: Sequence[Named], by_prefix: Sequence[Named]) -> str | None:
    """The id ``ref`` addresses: a name first, then an id prefix (at least ``MIN_PREFIX``
    characters). Among several of one name only the live ones count (a closed discussion keeps
    its name). ``None`` when nothing fits; refused when several do."""
    named = list(by_name)
    if len(named) > 1:
        named = [n for n in named if n.live] or named
    if len(named) == 1:
        return named[0].id
    if named:
        raise ambiguous(ref, what, named)
    if len(ref.strip()) < MIN_PREFIX:
        return None
    prefixed = list(by_prefix)
    if len(prefixed) == 1:
        return prefixed[0].id
    if prefixed:
        raise ambiguous(ref, what, prefixed)
    return None


def ambiguous(ref: str, what: str, candidates: Sequence[Named]) -> Conflict:
    shown = list(candidates)[:MAX_CANDIDATES]
    listed = ", ".join(f"{c.name!r} ({c.id})" for c in shown)
    return Conflict(
        f"{ref!r} could be any of {len(candidates)} {what}s: {listed}; give the full id or a "
        "longer id prefix",
        code=f"ambiguous_{what}",
        candidates=[{"id": c.id, "name": c.name} for c in shown],
    )


def short_ids(ids: Iterable[str], minimum: int = SHORT_ID) -> dict[str, str]:
    """Each id shortened to the fewest leading characters (at least ``minimum``) that tell it
    from the others given: ids made in the same moment share their first characters."""
    unique = sorted(set(ids))
    shortest: dict[str, str] = {}
    for i, full in enumerate(unique):
        length = minimum
        for other in (unique[i - 1] if i else "", unique[i + 1] if i + 1 < len(unique) else ""):
            common = 0
            for a, b in zip(full, other, strict=False):
                if a != b:
                    break
                common += 1
            length = max(length, common + 1)
        shortest[full] = full[: min(length, len(full))]
    return shortest


def name_taken(name: str, what: str, existing_id: str) -> Conflict:
    return Conflict(
        f"a {what} named {name!r} already exists ({existing_id}); names address {what}s, so "
        f"each names one: choose another name",
        code=f"{what}_name_taken",
        existing_id=existing_id,
    )
