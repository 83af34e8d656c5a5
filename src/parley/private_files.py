"""Files that only the hub's user may read: the data root (0700) and everything parley writes in
it (0600). The data root holds the database with everyone's mail, the runtime keys of agents and
the operator token, so another account on the machine must not be able to read any of it.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
# What ``parley serve`` sets for the whole process, so that a file created later by a library
# (a new WAL file, a log file) is private too, not only the files parley creates itself.
PRIVATE_UMASK = 0o077
_OTHERS = 0o077

log = logging.getLogger("parley.files")


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``, readable by this user only (0600), replacing any old file.

    The text goes to a new file renamed over the old one, so a client reading the file meanwhile
    (the CLI reads the hub's URL and the operator token) finds the old text or the new, never an
    empty or half-written file."""
    import tempfile  # only the hub writes these files; the CLI's start-up does not pay for it

    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # created 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def touch_private(path: Path) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist (an existing file is kept)."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE))


def restrict(path: Path) -> bool:
    """Take away every permission of group and others from ``path`` (not following a symlink);
    log one warning when it had any. Returns whether the mode was changed."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        return False
    mode = stat.S_IMODE(st.st_mode)
    if not mode & _OTHERS:
        return False
    private = mode & ~_OTHERS
    try:
        path.chmod(private)
    except OSError as exc:
        log.warning(
            "%s is open to other users (mode %s) and could not be restricted: %s; run chmod %s %s",
            path,
            oct(mode),
            exc.strerror,
            oct(private)[2:],
            path,
        )
        return False
    log.warning(
        "%s was open to other users (mode %s); restricted it to %s", path, oct(mode), oct(private)
    )
    return True


def secure_data_root(root: Path) -> list[Path]:
    """Create the data root 0700, or restrict an existing one and the entries directly in it
    (the root's own mode already keeps others out of anything deeper). Returns the paths whose
    mode was changed; each is logged once."""
    root.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    return [path for path in [root, *sorted(root.iterdir())] if restrict(path)]
