"""How workers look in a terminal: a state in its colour, a worker as one line, the child tree
as a ``rich.tree.Tree`` and workers as a table. ``parley worker …`` and the demo both print
with these, from the JSON the API returns (a worker's fields, or the nested tree nodes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

# Running is the only state that moves on its own; the ones that wait for a person are yellow,
# the ones that ended badly red, a job done blue, and the quiet ones dim.
STATE_STYLES: Mapping[str, str] = {
    "pending": "dim",
    "running": "bold green",
    "idle": "dim",
    "stale": "yellow",
    "interrupted": "yellow",
    "released": "dim",
    "completed": "blue",
    "failed": "red",
    "killed": "red",
}
# ``core/workers.py``'s final states, spelled out: the CLI starts without loading the models.
TERMINAL_STATES = frozenset({"released", "completed", "failed", "killed"})


def state_text(state: str | None) -> Text:
    """A worker's state in its colour."""
    name = state or "?"
    return Text(name, style=STATE_STYLES.get(name, ""))


def worker_label(node: Mapping[str, Any], names: Mapping[str, str] | None = None) -> Text:
    """One worker as one line: id, state, agent, its session's name when known, and the marks
    that matter for a cancel (independent, cancelled through whom)."""
    line = Text()
    line.append(str(node.get("id", "?")), style="bold")
    line.append("  ")
    line.append_text(state_text(node.get("state")))
    line.append(f"  {node.get('agent_id', '?')}")
    name = (names or {}).get(str(node.get("session_id")))
    if name:
        line.append(f"  {name}", style="italic")
    if node.get("independent"):
        line.append("  independent", style="cyan")
    source = node.get("cancel_propagated_from")
    if source:
        line.append(f"  cancelled through {source}", style="red")
    if node.get("pending_takeover_message_id"):
        line.append("  takeover pending", style="yellow")
    return line


def worker_tree(
    nodes: Sequence[Mapping[str, Any]],
    *,
    title: str,
    names: Mapping[str, str] | None = None,
    focus: str | None = None,
) -> Tree:
    """The child tree (nested nodes with ``children``) under one labelled root; the worker
    ``focus`` (the one asked about) is marked. A root that has a parent (hidden from the caller,
    or below the depth the hub nests a tree to) names it. Built without recursion: a tree may be
    deeper than Python's stack."""
    top = Tree(Text(title, style="bold"), guide_style="dim")
    stack: list[tuple[Tree, Mapping[str, Any], bool]] = [(top, n, True) for n in reversed(nodes)]
    while stack:
        branch, node, is_root = stack.pop()
        label = worker_label(node, names)
        parent = node.get("parent_worker_id")
        if is_root and parent:
            label.append(f"  under {parent}", style="dim")
        if focus is not None and node.get("id") == focus:
            label.append("  ◀", style="bold")
        sub = branch.add(label)
        stack.extend((sub, child, False) for child in reversed(node.get("children") or []))
    return top


def nest(workers: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Flat workers as the nested tree the API returns (roots first, by creation): each
    worker's fields and its ``children``. A worker whose parent is not among them is a root."""
    ordered = sorted(workers, key=lambda w: (str(w.get("created") or ""), str(w["id"])))
    ids = {str(w["id"]) for w in ordered}
    nodes = {str(w["id"]): {**w, "children": []} for w in ordered}
    roots: list[dict[str, Any]] = []
    for w in ordered:
        parent = w.get("parent_worker_id")
        siblings = nodes[str(parent)]["children"] if parent in ids else roots
        siblings.append(nodes[str(w["id"])])
    return roots


def tree_states(nodes: Iterable[Mapping[str, Any]]) -> tuple[tuple[Any, ...], ...]:
    """What a tree shows, flattened in order: a watcher draws the tree again only when this
    changes (not for a heartbeat)."""
    flat: list[tuple[Any, ...]] = []
    stack = list(nodes)
    while stack:
        node = stack.pop(0)
        flat.append(
            (
                node["id"],
                node.get("state"),
                node.get("cancel_propagated_from"),
                bool(node.get("pending_takeover_message_id")),
            )
        )
        stack[:0] = list(node.get("children") or [])
    return tuple(flat)


def session_names(topology: Mapping[str, Any]) -> dict[str, str]:
    """Session id → display name, from a topology (the session and its child sessions)."""
    sessions = [topology.get("session") or {}, *(topology.get("child_sessions") or [])]
    return {str(s["id"]): str(s.get("display_name") or "") for s in sessions if s.get("id")}


WORKER_COLUMNS = ("id", "state", "agent", "purpose", "parent", "updated")


def worker_table(
    title: str, workers: Iterable[Mapping[str, Any]], *, when: Any = None
) -> Table | None:
    """Workers as a table with coloured states that fits the terminal; None when there are
    none. ``when`` formats the ``updated`` time (the raw ISO text without it)."""
    # Imported here: the demo draws trees without the CLI's printing helpers.
    from parley.surfaces.cli.output import build_table

    rows = [
        (
            Text(str(w.get("id", ""))),
            state_text(w.get("state")),
            Text(str(w.get("agent_id") or "")),
            Text(str(w.get("purpose") or "")),
            Text(str(w.get("parent_worker_id") or "")),
            Text(when(w.get("updated")) if when else str(w.get("updated") or "")),
        )
        for w in workers
    ]
    return build_table(title, WORKER_COLUMNS, rows, drop=("parent",))
