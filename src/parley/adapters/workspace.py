"""Filesystem checks against agents' workspaces.

A summary file must exist and, fully resolved (``..`` and symlinks), lie inside the agent's
workspace; a refusal never says where a path resolves to, or a symlink to ``/proc/self/cwd``
would tell any agent where the hub runs. A new workspace must be an absolute directory that is
not a system directory and does not overlap another agent's workspace.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from parley.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from parley.core.limits import preview
from parley.private_files import PRIVATE_DIR, PRIVATE_FILE

# No workspace may be one of these: a summary path inside them could name any system file
# (``/etc/shadow`` in a workspace ``/``), and they hold other users' or the system's files.
SYSTEM_DIRS = frozenset(
    {
        "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
        "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp",
        "/usr", "/var", "/Applications", "/Library", "/System", "/Users", "/Volumes", "/private",
    }
)  # fmt: skip
# Nor may it lie anywhere inside these: pseudo file systems and the system's own files.
SYSTEM_TREES = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin",
    "/sys", "/usr", "/System", "/private/etc",
)  # fmt: skip


class LocalWorkspace:
    """Workspaces on this machine's filesystem."""

    def resolve_inside(self, workspace: str, path: str) -> Path:
        if not path or "\x00" in path:
            raise InvalidRequest("summaryPath is empty or not a path", code="invalid_summary_path")
        root, resolved = _resolve(workspace, path)
        if resolved != root and root not in resolved.parents:
            # Only what the caller gave and its own workspace are named: where a path outside
            # leads (``/proc/self/cwd``, ``/proc/self/fd/7``) is none of its business.
            raise PermissionDenied(
                f"summaryPath {path!r} resolves outside the workspace {workspace!r}; write the "
                "summary inside the workspace",
                code="summary_outside_workspace",
                workspace=workspace,
            )
        try:
            is_file = resolved.is_file()
        except OSError as exc:
            # e.g. a path component longer than the file system allows (ENAMETOOLONG)
            raise InvalidRequest(
                f"summaryPath {preview(path)} cannot be a file here: {exc.strerror}; give the "
                "path of the summary file you wrote",
                code="invalid_summary_path",
            ) from exc
        if not is_file:
            raise NotFound(
                f"summaryPath {path!r} is not a file in the workspace {workspace!r}; write the "
                "summary file first",
                code="summary_missing",
            )
        return resolved

    def write_inside(self, workspace: str, path: str, data: bytes) -> Path:
        if not path or "\x00" in path:
            raise InvalidRequest("the file path is empty or not a path", code="invalid_file_path")
        root, resolved = _resolve(workspace, path)
        if resolved == root:
            raise InvalidRequest(
                f"path {preview(path)} is the workspace itself; name a file in it, e.g. "
                "'summary.md'",
                code="invalid_file_path",
            )
        if root not in resolved.parents:
            # As for summaries: never say where a path outside leads.
            raise PermissionDenied(
                f"path {preview(path)} resolves outside your workspace {workspace!r}; write files "
                "inside your workspace, e.g. 'summary.md'",
                code="file_outside_workspace",
                workspace=workspace,
            )
        try:
            resolved.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
            # O_NOFOLLOW: the path was resolved above, so a symlink planted here since is refused
            # instead of followed out of the workspace.
            fd = os.open(
                resolved, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, PRIVATE_FILE
            )
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise InvalidRequest(
                f"path {preview(path)} cannot be written in the workspace: {exc.strerror}; give "
                "the path of a file, e.g. 'notes/summary.md'",
                code="invalid_file_path",
            ) from exc
        return resolved

    def prepare(self, workspace: str, taken: Mapping[str, str]) -> str:
        path = _absolute(workspace)
        resolved = os.path.realpath(path)
        _refuse_system_dir(workspace, resolved)
        mine = Path(resolved)
        for agent_id, other in taken.items():
            theirs = Path(os.path.realpath(other))
            if mine == theirs or theirs in mine.parents or mine in theirs.parents:
                raise Conflict(
                    f"workspace {preview(workspace)} overlaps the workspace of agent {agent_id!r}; "
                    "give each agent a directory of its own, neither inside the other",
                    code="workspace_overlap",
                    agent_id=agent_id,
                )
        _create(workspace, mine)
        return resolved


def _resolve(workspace: str, path: str) -> tuple[Path, Path]:
    """The workspace and ``path`` (relative to it unless absolute), both fully resolved (``..``
    and symlinks), for the one containment rule of summaries and written files."""
    root = Path(os.path.realpath(workspace))
    candidate = Path(path) if os.path.isabs(path) else root / path
    return root, Path(os.path.realpath(candidate))


def _absolute(workspace: str) -> str:
    if not workspace or "\x00" in workspace or not os.path.isabs(workspace):
        raise InvalidRequest(
            f"workspace {preview(workspace)} is not an absolute path; give the full path of a "
            "directory, such as '/home/me/projects/agent-a'",
            code="invalid_workspace",
        )
    return os.path.normpath(workspace)


def _refuse_system_dir(workspace: str, resolved: str) -> None:
    home = os.path.realpath(os.path.expanduser("~"))
    inside_system = any(resolved == t or resolved.startswith(t + "/") for t in SYSTEM_TREES)
    if resolved in SYSTEM_DIRS or resolved == home or inside_system:
        raise InvalidRequest(
            f"workspace {preview(workspace)} is a system directory or a home directory; give the "
            "agent a directory of its own, such as a project directory",
            code="invalid_workspace",
        )


def _create(workspace: str, path: Path) -> None:
    """Create a missing workspace (0700) inside an existing directory that is not a system
    directory (such as ``/`` or ``/home``), so that no request can scatter directories across
    the machine."""
    try:
        if path.is_dir():
            return
        if os.path.lexists(path):
            raise InvalidRequest(
                f"workspace {preview(workspace)} exists but is not a directory; give a directory",
                code="invalid_workspace",
            )
        if str(path.parent) in SYSTEM_DIRS or not path.parent.is_dir():
            raise InvalidRequest(
                f"workspace {preview(workspace)} does not exist, and parley creates a workspace "
                "only inside an existing directory that is not a system directory; create it "
                "first",
                code="invalid_workspace",
            )
        path.mkdir(mode=PRIVATE_DIR)
    except OSError as exc:
        if path.is_dir():
            return  # created by someone else in the meantime
        raise InvalidRequest(
            f"workspace {preview(workspace)} cannot be used: {exc.strerror}; give a directory "
            "you can create or that exists",
            code="invalid_workspace",
        ) from exc
