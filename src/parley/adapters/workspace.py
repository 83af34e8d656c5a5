"""Filesystem checks for summary files: the path must exist and, fully resolved (``..`` and
symlinks), lie inside the agent's workspace."""

from __future__ import annotations

import os
from pathlib import Path

from parley.core.errors import InvalidRequest, NotFound, PermissionDenied
from parley.core.limits import preview


class LocalWorkspace:
    """Workspaces on this machine's filesystem."""

    def resolve_inside(self, workspace: str, path: str) -> Path:
        if not path or "\x00" in path:
            raise InvalidRequest("summaryPath is empty or not a path", code="invalid_summary_path")
        root = Path(os.path.realpath(workspace))
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = root / candidate
        resolved = Path(os.path.realpath(candidate))
        if resolved != root and root not in resolved.parents:
            raise PermissionDenied(
                f"summaryPath {path!r} resolves to {str(resolved)!r}, outside the workspace "
                f"{str(root)!r}; write the summary inside the workspace",
                code="summary_outside_workspace",
                resolved=str(resolved),
                workspace=str(root),
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
                f"summaryPath {path!r} does not exist (resolved to {str(resolved)!r}); write the "
                "summary file first",
                code="summary_missing",
            )
        return resolved
