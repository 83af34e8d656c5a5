"""An agent's workspace bounds the summary files it may hand in, so the operator cannot give it
a relative path, the file system's root, a system directory, a home directory or a directory
that overlaps another agent's workspace; a missing workspace is created, private (0700)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from parley.service.hub import Hub

Api = Any


async def create(api: Api, hub: Hub, agent_id: str, workspace: str) -> Any:
    assert hub.operator_token is not None
    return await api(hub.operator_token).post(
        "/v1/agents", json={"id": agent_id, "workspace": workspace}
    )


async def refused(api: Api, hub: Hub, workspace: str, status: int, code: str) -> dict[str, Any]:
    r = await create(api, hub, "newcomer", workspace)
    assert (r.status_code, r.json()["code"]) == (status, code), (workspace, r.text)
    assert (await api(hub.operator_token).get("/v1/agents/newcomer")).status_code == 404
    body: dict[str, Any] = r.json()
    return body


@pytest.mark.parametrize("workspace", ["ws", ".", "..", "~/ws", "./ws", "", "ws/../other"])
async def test_a_relative_workspace_is_refused(
    hub: Hub, api: Api, workspace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative path would otherwise name a real directory here
    body = await refused(api, hub, workspace, 400, "invalid_workspace")
    assert "absolute" in body["message"]


@pytest.mark.parametrize(
    "workspace", ["/", "//", "/etc", "/etc/", "/usr", "/usr/share", "/proc/self", "/dev", "/tmp"]
)
async def test_the_root_and_system_directories_are_refused(
    hub: Hub, api: Api, workspace: str
) -> None:
    body = await refused(api, hub, workspace, 400, "invalid_workspace")
    assert repr(workspace) in body["message"]


async def test_a_symlink_to_the_root_or_the_home_directory_is_refused(
    hub: Hub, api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "to-root").symlink_to("/")
    await refused(api, hub, str(tmp_path / "to-root"), 400, "invalid_workspace")
    home = tmp_path / "home-of-the-hub-user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    await refused(api, hub, str(home), 400, "invalid_workspace")


async def test_an_overlapping_workspace_is_refused_naming_the_other_agent(
    hub: Hub, api: Api, tmp_path: Path
) -> None:
    taken = tmp_path / "projects" / "alice"
    taken.mkdir(parents=True)
    assert (await create(api, hub, "alice", str(taken))).status_code == 201
    (tmp_path / "link-to-alice").symlink_to(taken)
    for workspace in [
        taken,  # the same
        tmp_path / "projects" / "alice" / "sub",  # inside
        tmp_path / "projects",  # containing
        tmp_path / "projects" / "x" / ".." / "alice",  # the same, spelled otherwise
        tmp_path / "link-to-alice",  # the same through a symlink
    ]:
        body = await refused(api, hub, str(workspace), 409, "workspace_overlap")
        assert "'alice'" in body["message"]
        assert body["details"]["agent_id"] == "alice"
    assert not (tmp_path / "projects" / "alice" / "sub").exists()
    # A sibling does not overlap.
    assert (await create(api, hub, "bob", str(tmp_path / "projects" / "bob"))).status_code == 201


async def test_a_missing_workspace_is_created_private(hub: Hub, api: Api, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    r = await create(api, hub, "alice", str(tmp_path / "alias" / "new-ws"))
    assert r.status_code == 201, r.text
    made = tmp_path / "real" / "new-ws"
    assert made.is_dir()
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    # Stored absolute with symlinks resolved, so a later change of the link moves nothing.
    assert r.json()["principal"]["workspace"] == str(made.resolve())


async def test_a_workspace_that_cannot_be_a_directory_is_refused(
    hub: Hub, api: Api, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("x")
    await refused(api, hub, str(tmp_path / "a-file"), 400, "invalid_workspace")
    # Only the last component is created: a typo deep in a path does not build a tree.
    await refused(api, hub, str(tmp_path / "missing" / "deeper"), 400, "invalid_workspace")
    assert not (tmp_path / "missing").exists()
    # Nothing is created at the top of the file system.
    await refused(api, hub, "/parley-test-workspace-that-must-not-exist", 400, "invalid_workspace")
    assert not Path("/parley-test-workspace-that-must-not-exist").exists()
