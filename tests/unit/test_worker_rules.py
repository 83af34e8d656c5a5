"""The pure rules of workers (W2–W7): the transition table, spawn naming, result budgets, the
cancel tree, orphans, staleness and the texts a worker reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import product

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parley.core import workers as wk
from parley.core.identity import Principal
from parley.core.workers import IllegalWorkerTransition, Worker, WorkerResult

T0 = datetime(2026, 1, 1, tzinfo=UTC)

LEGAL = {
    ("pending", "running"),
    ("pending", "interrupted"),
    ("pending", "failed"),
    ("pending", "killed"),
    ("running", "idle"),
    ("running", "stale"),
    ("running", "interrupted"),
    ("running", "completed"),
    ("running", "failed"),
    ("running", "killed"),
    ("idle", "running"),
    ("idle", "stale"),
    ("idle", "interrupted"),
    ("idle", "completed"),
    ("idle", "released"),
    ("idle", "killed"),
    ("stale", "running"),
    ("stale", "interrupted"),
    ("stale", "released"),
    ("stale", "killed"),
    ("interrupted", "running"),
    ("interrupted", "failed"),
    ("interrupted", "killed"),
}


def worker(worker_id: str, parent: str | None = None, **kw: object) -> Worker:
    values: dict[str, object] = {
        "id": worker_id,
        "agent_id": "a",
        "session_id": f"vs-{worker_id}",
        "channel_id": f"c-{worker_id}",
        "trace_id": "tr-1",
        "created_by": "operator",
        "created": T0,
        "updated": T0,
        "last_heartbeat": T0,
        "parent_worker_id": parent,
        "state": "running",
    }
    values.update(kw)
    return Worker.model_validate(values)


@pytest.mark.parametrize(("state", "to"), sorted(product(wk.WORKER_STATES, repeat=2)))
def test_every_transition_is_legal_exactly_when_the_table_says(state: str, to: str) -> None:
    if (state, to) in LEGAL:
        wk.check_transition("w-1", state, to)
        return
    with pytest.raises(IllegalWorkerTransition) as err:
        wk.check_transition("w-1", state, to)
    assert err.value.code == "illegal_worker_transition"
    assert err.value.details == {"worker_id": "w-1", "state": state, "to": to}
    assert repr(state) in err.value.message and repr(to) in err.value.message


def test_terminal_states_have_no_way_out() -> None:
    for state in wk.TERMINAL:
        assert wk.TRANSITIONS[state] == frozenset()
    assert {"released", "completed", "failed", "killed"} == wk.TERMINAL


def test_child_names_carry_the_parent_and_a_slug_of_the_prompt() -> None:
    assert wk.child_name("lead", "Find the flaky tests!") == "lead / find-the-flaky-tests"
    long_parent = "a very long parent session name that goes on"
    name = wk.child_name(long_parent, "Refactor the parser module")
    assert len(name) <= wk.NAME_MAX
    assert name.endswith(" / refactor-the")
    assert name.startswith("a very long")
    assert "…" in name
    assert wk.child_name("p", "¿?!") == "p / task"


@given(st.text(max_size=80), st.text(max_size=300))
def test_child_names_never_exceed_forty_characters(parent: str, prompt: str) -> None:
    name = wk.child_name(parent, prompt)
    assert len(name) <= wk.NAME_MAX
    assert " / " in name


def test_the_budget_counts_about_four_characters_a_token() -> None:
    assert wk.estimate_tokens("") == 0
    assert wk.estimate_tokens("abcd") == 1
    assert wk.estimate_tokens("abcde") == 2
    assert not wk.over_budget("x" * 8000, 2000)
    assert wk.over_budget("x" * 8001, 2000)


def test_cancel_walks_the_tree_but_spares_independent_subtrees_and_ended_workers() -> None:
    root = worker("r")
    a = worker("a", "r")
    b = worker("b", "a")
    c = worker("c", "b")
    free = worker("f", "r", independent=True)
    under_free = worker("g", "f")
    done = worker("d", "a", state="completed")
    under_done = worker("e", "d")
    children = {"r": [a, free], "a": [b, done], "b": [c], "f": [under_free], "d": [under_done]}
    plan = wk.cancel_plan(root, children)
    # A finished worker is not cancelled again, but its unfinished children are.
    assert [(w.id, src) for w, src in plan] == [
        ("r", None),
        ("a", "r"),
        ("b", "a"),
        ("e", "d"),
        ("c", "b"),
    ]
    ids = {w.id for w, _ in plan}
    assert "f" not in ids and "g" not in ids and "d" not in ids
    assert wk.cancel_plan(root, children, propagate=False) == [(root, None)]


def test_orphans_are_unfinished_children_of_ended_or_missing_parents() -> None:
    gone = worker("child-of-gone", "nobody")
    ended_parent = worker("p", state="released")
    of_ended = worker("child-of-ended", "p")
    live_parent = worker("q")
    of_live = worker("child-of-live", "q")
    finished = worker("finished", "p", state="completed")
    every = [gone, ended_parent, of_ended, live_parent, of_live, finished]
    found = wk.orphans(every, {w.id: w for w in every})
    assert {w.id for w in found} == {"child-of-gone", "child-of-ended"}


def test_staleness_spares_pending_takeovers_and_long_running_workers() -> None:
    silent = worker("s", last_heartbeat=T0)
    later = T0 + timedelta(seconds=1501)
    assert wk.is_stale(silent, later, 1500)
    assert not wk.is_stale(silent, T0 + timedelta(seconds=1500), 1500)
    assert not wk.is_stale(worker("t", pending_takeover_message_id="m"), later, 1500)
    assert not wk.is_stale(worker("l", long_running=True), later, 1500)
    assert not wk.is_stale(worker("i", state="interrupted"), later, 1500)
    assert wk.is_stale(worker("idle", state="idle"), later, 1500)


def test_the_takeover_envelope_says_it_is_a_takeover_of_an_interrupted_turn() -> None:
    text = wk.takeover_envelope(
        by="Maple", instruction="Go back to plan X", interrupted=True, working_on="refactor\nmore"
    )
    assert text.startswith(
        '[TAKEOVER] Maple interrupted your turn while you were working on: "refactor"\n'
    )
    assert "more" not in text
    assert "This is a takeover of an interrupted turn, not a new task" in text
    assert "<takeover_instruction>\n> Go back to plan X\n</takeover_instruction>" in text
    calm = wk.takeover_envelope(by="M", instruction="x", interrupted=False, working_on="")
    assert "interrupted" not in calm and "your last task" in calm


def test_results_and_mail_blocks_read_plainly() -> None:
    ok = wk.result_text("lead / x", WorkerResult(summary="all good", success=True))
    assert (
        ok == "[TASK RESULT] lead / x succeeded.\n\nSummary, as the child reported it:\n> all good"
    )
    ref = wk.result_text("c", WorkerResult(success=True, artifact_id="art-1", summary_tokens=3000))
    assert "artifact art-1" in ref and "3000 tokens" in ref
    failed = wk.result_text("c", WorkerResult(success=False, error="boom"))
    assert "failed" in failed and "Error:\n> boom" in failed
    assert wk.mail_block([]) == ""
    block = wk.mail_block([("info", "op", "hi", "body text")])
    assert block.startswith("<pending_mail>") and block.endswith("</pending_mail>")
    assert '[1] info from op, subject "hi":\n> body text\n</pending_mail>' in block


def test_the_dispatch_names_the_parent_the_context_and_how_to_finish() -> None:
    text = wk.dispatch_text(
        parent_name="lead",
        prompt="Do X",
        purpose="research",
        inherited_context=wk.inherited_context([("lead", "earlier")], 1000),
        expected_artifacts=["report.md"],
    )
    assert text.startswith("# Task from lead (research)\n\n> Do X")
    assert "## Inherited context" in text and "lead:\n> earlier" in text
    assert "- report.md" in text
    assert "task-result" in text


def test_topology_nests_children_under_parents() -> None:
    rows = [worker("r"), worker("a", "r"), worker("b", "a"), worker("x", "gone")]
    tree = wk.topology(rows, nesting=8)
    assert [(n["id"], n["parent_worker_id"]) for n in tree] == [("r", None), ("x", "gone")]
    assert tree[0]["children"][0]["id"] == "a"
    assert tree[0]["children"][0]["children"][0]["id"] == "b"
    assert [(n["id"], level) for n, level in wk.walk(tree)] == [
        ("r", 0),
        ("a", 1),
        ("b", 2),
        ("x", 0),
    ]


def chain(length: int, **kw: object) -> list[Worker]:
    """w0 → w1 → … → w<length-1>, each the parent of the next, created in that order."""
    return [
        worker(f"w{i}", f"w{i - 1}" if i else None, created=T0 + timedelta(seconds=i), **kw)
        for i in range(length)
    ]


def depth_of(nodes: list[dict[str, object]]) -> int:
    """How deep a tree of nested nodes goes (1: roots only), without recursion."""
    return max((level + 1 for _, level in wk.walk(nodes)), default=0)  # type: ignore[arg-type]


def test_a_tree_deeper_than_its_nesting_goes_on_as_roots_that_name_their_parent() -> None:
    rows = chain(2000)
    tree = wk.topology(rows, nesting=8)
    # Nine levels (0 to 8) nest; the tenth worker starts a tree of its own, and so on: every
    # worker is there once, and no answer is deeper than the bound.
    assert depth_of(tree) == 9
    assert [n["id"] for n in tree][:3] == ["w0", "w9", "w18"]
    assert [n["parent_worker_id"] for n in tree][:3] == [None, "w8", "w17"]
    assert sorted(n["id"] for n, _ in wk.walk(tree)) == sorted(w.id for w in rows)
    # Siblings keep their creation order, also under a root that goes on below the bound.
    wide = [*chain(3), worker("z", "w2", created=T0 + timedelta(seconds=9))]
    wide.append(worker("y", "w2", created=T0 + timedelta(seconds=5)))
    [root, below] = wk.topology(wide, nesting=1)
    assert (root["id"], below["id"]) == ("w0", "w2")
    assert [c["id"] for c in below["children"]] == ["y", "z"]


def test_workers_in_a_parent_cycle_are_shown_once_as_roots() -> None:
    rows = [worker("a", "b"), worker("b", "a"), worker("r")]
    tree = wk.topology(rows, nesting=8)
    assert sorted(n["id"] for n, _ in wk.walk(tree)) == ["a", "b", "r"]
    assert wk.ancestors(rows[0], {w.id: w for w in rows}) == [rows[1]]


def test_the_parent_chain_decides_who_controls_and_who_sees_a_worker() -> None:
    def who(principal_id: str, role: str = "member") -> Principal:
        return Principal(
            id=principal_id, kind="agent", role=role, display_name=principal_id, created=T0
        )

    root = worker("r", agent_id="lead", created_by="ops")
    child = worker("c", "r", agent_id="helper", created_by="lead")
    grandchild = worker("g", "c", agent_id="scout", created_by="helper")
    sibling = worker("s", "r", agent_id="other", created_by="lead")
    by_id = {w.id: w for w in (root, child, grandchild, sibling)}
    assert [w.id for w in wk.ancestors(grandchild, by_id)] == ["c", "r"]
    assert wk.ancestors(root, by_id) == []
    # A parent outside the rows given ends the chain.
    assert wk.ancestors(grandchild, {"c": child}) == [child]

    def sees(principal: Principal, w: Worker) -> bool:
        return wk.may_see(principal, w, wk.ancestors(w, by_id))

    def controls(principal: Principal, w: Worker) -> bool:
        return wk.may_control(principal, w, wk.ancestors(w, by_id))

    # The agent of an ancestor and whoever started or spawned one control all below it.
    assert controls(who("lead"), grandchild) and controls(who("ops"), grandchild)
    assert controls(who("helper"), grandchild) and not controls(who("helper"), sibling)
    # A worker's own agent sees it without controlling it; a stranger does neither.
    assert sees(who("scout"), grandchild) and not controls(who("scout"), grandchild)
    assert not sees(who("scout"), child) and not sees(who("other"), grandchild)
    assert controls(who("boss", role="operator"), sibling)
    # One pass over many workers says the same as the rule on each.
    every = list(by_id.values())
    for name in ("lead", "ops", "helper", "scout", "other", "nobody"):
        assert wk.visible(who(name), every) == [w for w in every if sees(who(name), w)], name
    assert wk.visible(who("boss", role="operator"), every) == every


def test_whoever_is_above_a_worker_controls_it_however_deep_it_sits() -> None:
    def who(principal_id: str) -> Principal:
        return Principal(id=principal_id, kind="agent", display_name=principal_id, created=T0)

    rows = chain(1500, agent_id="x", created_by="x")
    rows[0] = rows[0].model_copy(update={"agent_id": "lead"})
    deepest = rows[-1]
    by_id = {w.id: w for w in rows}
    assert len(wk.ancestors(deepest, by_id)) == 1499
    assert wk.may_control(who("lead"), deepest, wk.ancestors(deepest, by_id))
    assert wk.visible(who("lead"), reversed(rows)) == list(reversed(rows))
    assert wk.visible(who("y"), rows) == []


def test_the_cli_knows_the_same_states_as_the_hub() -> None:
    from parley.surfaces.cli.worker_view import STATE_STYLES, TERMINAL_STATES

    assert TERMINAL_STATES == wk.TERMINAL
    assert set(STATE_STYLES) == set(wk.WORKER_STATES)


def test_the_cli_nests_and_draws_a_tree_deeper_than_pythons_stack() -> None:
    from parley.surfaces.cli.worker_view import nest, worker_tree

    rows = [w.model_dump(mode="json") for w in chain(3000)]
    nested = nest(reversed(rows))
    assert [(n["id"], level) for n, level in wk.walk(nested)][-1] == ("w2999", 2999)
    drawn = worker_tree(nested, title="deep", focus="w2999")
    branches, count = [drawn], 0
    while branches:
        branch = branches.pop()
        count += 1
        branches.extend(branch.children)
    assert count == 3001  # the title and every worker
    # A root that has a parent (hidden, or below the nesting bound) says where it belongs.
    [shown] = worker_tree([{**rows[5], "children": []}], title="t").children
    assert f"under {rows[4]['id']}" in str(shown.label)


def test_a_task_dispatch_is_named_by_its_prompt_not_its_heading() -> None:
    dispatch = wk.dispatch_text(
        parent_name="lead",
        prompt="Port the parser\nto the new grammar",
        purpose="task-dispatch",
        inherited_context="",
        expected_artifacts=(),
    )
    assert wk.task_line(dispatch) == '"Port the parser"'
    resumed = wk.resume_text(last_trigger=dispatch, reason="x", orphaned=False, note="")
    assert resumed.startswith('[RESUME] Your work on: "Port the parser"\n')


def test_a_worker_channel_note_and_envelopes_are_not_taken_for_its_task() -> None:
    note = wk.turn_interrupted("the hub stopped while it ran")
    assert note.startswith("[Turn Interrupted]") and "discussion" not in note.lower()
    assert not wk.is_task_message("system", {})
    assert not wk.is_task_message("system", {"worker_id": "w", "resume_by": "op"})
    assert not wk.is_task_message("system", {"worker_id": "w", "takeover_message_id": "m"})
    assert wk.is_task_message("system", {"worker_id": "w", "dispatch_message_id": "m"})
    assert wk.is_task_message("human", {})
