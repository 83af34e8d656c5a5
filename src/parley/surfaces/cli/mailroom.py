"""``parley mailroom export|import``: the mailroom directory format (M9) on local disk.

The hub renders and parses the files; the CLI only moves them between the API and a directory,
byte for byte (UTF-8, no newline translation), so export then import stays lossless.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import typer
from rich.text import Text

from parley.surfaces.cli.client import CliFailure
from parley.surfaces.cli.output import JsonFlag, client, console, emit

mailroom_app = typer.Typer(help="Export and import the mailroom directory format.")

Directory = Annotated[Path, typer.Argument(metavar="DIR", help="The mailroom directory.")]


def safe_relpath(relpath: str) -> PurePosixPath:
    """Refuse a path from the hub that would land outside the target directory."""
    rel = PurePosixPath(relpath)
    if not relpath or rel.is_absolute() or ".." in rel.parts or "\\" in relpath:
        raise CliFailure(
            f"the hub sent the file name {relpath!r}, which is not a plain relative path; "
            "nothing was written",
            code="unsafe_path",
        )
    return rel


def write_files(root: Path, files: dict[str, str]) -> list[Path]:
    targets = [(root.joinpath(*safe_relpath(rel).parts), text) for rel, text in files.items()]
    written = []
    for path, text in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
        written.append(path)
    return written


def read_files(root: Path) -> dict[str, str]:
    """Every regular file under ``root`` except hidden ones (``.git``, editor files)."""
    files: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        try:
            files[rel.as_posix()] = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CliFailure(
                f"{str(path)!r} is not UTF-8 text ({exc.reason}); mailroom files are markdown",
                code="not_utf8",
            ) from exc
    return files


@mailroom_app.command("export")
def export(
    ctx: typer.Context,
    directory: Directory,
    force: Annotated[
        bool, typer.Option(help="Write into a directory that is not empty (files are replaced).")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Write the whole mailroom (inboxes and archive) as files into DIR (operator).

    The format's own names: the operator is written `ceo` (`from: ceo`, `…-task-ceo-to-bob.md`)
    and a broadcast's recipient `all`; an import reads them back as the operator and `*`."""
    root = directory.expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise CliFailure(f"{str(root)!r} is not a directory", code="not_a_directory")
    if root.is_dir() and any(root.iterdir()) and not force:
        raise CliFailure(
            f"{str(root)!r} is not empty; choose an empty directory or pass --force to write "
            "into it",
            code="directory_not_empty",
        )
    exported = client(ctx).get("/v1/mailroom/export")
    files: dict[str, str] = exported.get("files", {})
    root.mkdir(parents=True, exist_ok=True)
    written = write_files(root, files)

    def render(_: Any) -> None:
        console.print(Text(f"exported {len(written)} files into {root}"))

    emit(ctx, as_json, exported, render)


@mailroom_app.command("import")
def import_(ctx: typer.Context, directory: Directory, as_json: JsonFlag = False) -> None:
    """Read a mailroom directory and import its messages into the hub (operator)."""
    root = directory.expanduser().resolve()
    if not root.is_dir():
        raise CliFailure(f"{str(root)!r} is not a directory", code="not_a_directory")
    files = read_files(root)
    result = client(ctx).post("/v1/mailroom/import", {"files": files})

    def render(data: Any) -> None:
        console.print(Text(f"sent {len(files)} files from {root} to the hub"))
        if isinstance(data, dict):
            for key, value in data.items():
                if isinstance(value, int | str):
                    console.print(Text(f"  {key}: {value}"))
                elif isinstance(value, list):
                    console.print(Text(f"  {key}: {len(value)}"))

    emit(ctx, as_json, result, render)
