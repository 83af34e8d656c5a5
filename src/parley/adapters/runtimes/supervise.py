"""The supervisor between the hub and one command-line agent: it owns every process the agent
starts, and ends them all when the agent exits, when the hub stops it, or when the hub dies.

    python -I supervise.py <lifeline fd> <grace s> -- <argv...>

Run by :class:`parley.adapters.runtimes.child.ChildProcess` as a script of its own (the standard
library and psutil only, nothing of parley), in a new session whose leader it is. It

- becomes a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``): a process the agent starts in
  a session of its own (Claude Code runs its Bash tool so) whose parent exits is re-parented to
  the supervisor, not to init, so the walk of its descendants still finds it;
- starts the agent with the same stdin, stdout and stderr, reports ``started <pid>`` (or
  ``error <message>``) on the lifeline, a socket whose other end only the hub holds;
- watches the lifeline: end of file means the hub process is gone (a SIGKILL included, since
  the kernel closes a dead process's sockets), whichever of its threads started the supervisor;
- on the agent's exit, on SIGTERM/SIGINT/SIGHUP (the hub's stop), or on the hub's death, sends
  SIGTERM to every descendant, waits up to the grace period, sends SIGKILL to what remains, reaps
  them, and exits as the agent did (its exit status, or the same signal).

``PR_SET_PDEATHSIG`` alone would be wrong: it fires when the *thread* that forked the supervisor
ends, not the hub. It is still asked for (SIGUSR1), and taken as the hub's death only when the
supervisor's parent has changed. Elsewhere than Linux the supervisor still ends the descendants
it can see, but a tool whose parent died first escapes it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_KILL_ROUNDS_S = 5.0
"""How long SIGKILL is repeated while descendants remain (new ones may be forked meanwhile)."""


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class Supervisor:
    def __init__(self, lifeline: socket.socket, grace_s: float) -> None:
        self.lifeline = lifeline
        self.grace_s = grace_s
        self.parent = os.getppid()
        self.cli: int | None = None
        self.status: int | None = None
        """The agent's wait status once it has exited."""
        self.stop_requested = False
        self.hub_gone = False
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for sig in (*_STOP_SIGNALS, signal.SIGCHLD, signal.SIGUSR1):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum in _STOP_SIGNALS:
            self.stop_requested = True
        elif signum == signal.SIGUSR1 and os.getppid() != self.parent:
            # The parent-death signal: the hub is gone only if the parent changed (the thread
            # that forked us may have ended while the hub lives on).
            self.hub_gone = True

    def start(self, argv: list[str]) -> bool:
        try:
            self.cli = os.posix_spawnp(
                argv[0],
                argv,
                os.environ,
                setsigdef=(*_STOP_SIGNALS, signal.SIGCHLD, signal.SIGUSR1, signal.SIGPIPE),
                setsigmask=(),
            )
        except OSError as exc:
            self._say(f"error {exc}")
            return False
        self._say(f"started {self.cli}")
        # The agent's pipes are the agent's: the hub must see stdin's reader go and stdout's end
        # when the agent's tree lets go of them, not when the supervisor does.
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        return True

    def _say(self, line: str) -> None:
        with contextlib.suppress(OSError):
            self.lifeline.sendall(line.encode("utf-8", "replace") + b"\n")

    def run(self) -> None:
        """Wait for the agent's exit, a stop, or the hub's death; then end every descendant."""
        # Imported once the agent runs, not before: its start does not wait for it.
        import psutil  # noqa: F401

        while True:
            self._reap()
            if self.status is not None or self.stop_requested or self.hub_gone:
                break
            ready, _, _ = select.select([self.lifeline.fileno(), self.wake_r], [], [])
            if self.wake_r in ready:
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    os.read(self.wake_r, 512)
            if self.lifeline.fileno() in ready:
                try:
                    data = self.lifeline.recv(512)
                except OSError:
                    data = b""
                if not data:
                    self.hub_gone = True
        self.end_tree(self.grace_s if self.status is None else 0.0)

    def _reap(self) -> None:
        """Collect every exited child (re-parented orphans included); note the agent's status."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if pid == 0:
                return
            if pid == self.cli:
                self.status = status

    def _descendants(self) -> list[psutil.Process]:
        import psutil

        try:
            found = psutil.Process().children(recursive=True)
        except psutil.Error:
            return []
        alive = []
        for proc in found:
            with contextlib.suppress(psutil.Error):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
        return alive

    def _signal_all(self, sig: int) -> int:
        import psutil

        procs = self._descendants()
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
        return len(procs)

    def end_tree(self, grace_s: float) -> None:
        """SIGTERM to every descendant, up to ``grace_s`` for them to go, then SIGKILL until
        none remains; every one of them is reaped."""
        if grace_s > 0 and self._signal_all(signal.SIGTERM):
            deadline = time.monotonic() + grace_s
            while self._descendants() and time.monotonic() < deadline:
                self._pause(deadline)
                self._reap()
        deadline = time.monotonic() + _KILL_ROUNDS_S
        while self._signal_all(signal.SIGKILL) and time.monotonic() < deadline:
            self._pause(min(deadline, time.monotonic() + 0.05))
            self._reap()
        self._reap()

    def _pause(self, until: float) -> None:
        """Wait for a SIGCHLD (through the wakeup pipe) until ``until`` at the latest."""
        timeout = max(0.0, until - time.monotonic())
        ready, _, _ = select.select([self.wake_r], [], [], min(timeout, 0.05))
        if ready:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                os.read(self.wake_r, 512)

    def exit(self) -> None:
        """Exit as the agent did: its exit status, or the signal that ended it."""
        status = self.status
        if status is None:
            os._exit(1)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            signal.set_wakeup_fd(-1)
            with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            os._exit(128 + sig)  # a signal that does not end a process
        os._exit(os.waitstatus_to_exitcode(status))


def main(args: list[str]) -> None:
    fd, grace, dashes, *argv = args
    if dashes != "--" or not argv:
        sys.stderr.write("usage: supervise.py <lifeline fd> <grace s> -- <argv...>\n")
        os._exit(2)
    lifeline = socket.socket(fileno=int(fd))
    os.set_inheritable(lifeline.fileno(), False)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    supervisor = Supervisor(lifeline, float(grace))
    _prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1)
    if os.getppid() != supervisor.parent:
        os._exit(1)  # the hub died before the death signal was armed
    if not supervisor.start(argv):
        os._exit(127)
    try:
        supervisor.run()
    except BaseException:
        supervisor.end_tree(0.0)
        raise
    supervisor.exit()


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except OSError as exc:
        if exc.errno != errno.EINTR:
            raise
