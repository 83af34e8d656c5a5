"""The printing helpers every CLI command module shares — no hub."""

from __future__ import annotations

import json
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from parley.surfaces.cli.output import JsonFlag, ctrl_c_stops_watching, emit_parts, json_object


def test_ctrl_c_ends_a_live_view_with_status_0_and_other_errors_pass() -> None:
    with pytest.raises(typer.Exit) as stopped, ctrl_c_stops_watching():
        raise KeyboardInterrupt
    assert stopped.value.exit_code == 0
    with pytest.raises(ValueError, match="not a stop"), ctrl_c_stops_watching():
        raise ValueError("not a stop")


def test_json_object_names_the_option_it_refuses() -> None:
    assert json_object('{"max_rounds": 3}', "--config-json") == {"max_rounds": 3}
    with pytest.raises(typer.BadParameter, match="not valid JSON") as bad:
        json_object("{nope", "--config-json")
    assert bad.value.param_hint == "--config-json"
    with pytest.raises(typer.BadParameter, match="must be a JSON object") as listed:
        json_object("[1, 2]", "--runtime-json")
    assert listed.value.param_hint == "--runtime-json"


def parts_app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def show(ctx: typer.Context, as_json: JsonFlag = False) -> None:
        def say(label: str) -> Any:
            return lambda value: print(f"{label}: {value}")

        emit_parts(ctx, as_json, {"room": ("r1", say("room")), "members": ([1, 2], say("who"))})

    return app


def test_emit_parts_prints_one_json_object_or_each_part_in_order() -> None:
    runner = CliRunner()
    machine = runner.invoke(parts_app(), ["--json"])
    assert machine.exit_code == 0, machine.output
    assert list(json.loads(machine.stdout).items()) == [("room", "r1"), ("members", [1, 2])]
    readable = runner.invoke(parts_app(), [])
    assert readable.exit_code == 0, readable.output
    assert readable.stdout.splitlines() == ["room: r1", "who: [1, 2]"]
