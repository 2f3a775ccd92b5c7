# -*- test-case-name: tests.daemon.test_shutdown -*-
"""
The process groups stdio upstreams run in, and the strays a killed daemon leaves.

Every stdio upstream is started through a small launcher (L{LAUNCHER}: one extra
interpreter start, no process that stays) which, before it replaces itself with the
server's command:

 - calls C{setsid()}, so the server and everything it forks share a session and a
   process group of their own, which the channel signals as a whole;
 - on Linux, asks for C{SIGKILL} when the daemon dies (C{PR_SET_PDEATHSIG}), and
   exits at once if the daemon is already gone;
 - changes to the server's directory.  Doing that here rather than through
   C{spawnProcess(path=...)} lets Twisted keep using C{posix_spawn}, which is much
   cheaper than forking a large daemon.

C{PR_SET_PDEATHSIG} reaches the server, not what the server forked.  So each group is
also recorded in the state directory (C{upstreams/<pid>.json}) with the daemon's run id,
and every upstream carries a run mark in its environment, C{MCPX_DAEMON_RUN=<run>/<n>}:
the daemon's run id and the upstream's number, which what it forks inherits.  A
starting daemon reads the records a dead daemon left and kills every process that
carries that daemon's run id, in whatever session or group it moved to: the run id is
what proves that a process is really one of ours.  Finding them needs C{/proc};
elsewhere the records are only removed.

What an upstream forks into a session of its own (C{setsid}) is outside the group
C{killpg} reaches.  Such a process is still the upstream's while it sits below it, and
once its parent has exited it is the daemon's child (the daemon is their subreaper,
L{mcpx.upstream.lineage}) and carries the upstream's mark: L{ProcessGroups.signal}
reaches those too, so what an upstream started ends with it.  One that both left and
shed its mark cannot be told to a server: it ends when the daemon stops
(L{ProcessGroups.end_adopted}).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from twisted.logger import Logger

from mcpx.upstream.lineage import (
    MAX_CHAIN,
    RUN_VARIABLE,
    adopted,
    descendants,
    holds_socket,
    mark,
    parent,
    pids,
    reap_adopted,
    run_of,
    stat_fields,
    vanished,
)

__all__ = ["LAUNCHER", "RECORDS_DIRECTORY", "RUN_VARIABLE", "ProcessGroups", "start_time"]

#: Where the records live, in the state directory.
RECORDS_DIRECTORY: Final = "upstreams"

#: The launcher, run as C{python -I -S -c LAUNCHER cwd daemon-pid executable argv...}.
LAUNCHER: Final = """\
import os, sys
cwd, daemon = sys.argv[1], int(sys.argv[2])
os.setsid()
if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)
    if os.getppid() != daemon:
        os._exit(1)
try:
    if cwd:
        os.chdir(cwd)
    os.execv(sys.argv[3], sys.argv[4:])
except OSError as e:
    sys.stderr.write(f"mcpx: cannot start {sys.argv[3]}: {e}\\n")
    os._exit(127)
"""

_log = Logger()


def start_time(pid: int) -> str | None:
    """When C{pid} started, in clock ticks since boot (C{/proc}), or C{None}."""
    fields = stat_fields(pid)
    # Field 22 of stat; the list starts at field 3.
    return None if fields is None else fields[19]


def _run_id() -> str:
    started = start_time(os.getpid())
    return f"{os.getpid()}.{started if started is not None else secrets.token_hex(6)}"


class ProcessGroups:
    """
    How stdio upstreams are launched and signalled, and the record of their groups.

    @ivar run: this daemon's run id (its pid and start time).
    @ivar directory: where the groups are recorded, or C{None} to keep no record.
    """

    def __init__(self, directory: Path | None, python: str = sys.executable) -> None:
        self.directory = directory
        self.run = _run_id()
        self._python = python
        #: The leaders of the groups started and not yet gone, with their upstream's mark.
        self._live: dict[int, str] = {}
        self._marks = 0

    @property
    def marker(self) -> Mapping[str, str]:
        """The run mark alone: what a process this daemon started may carry."""
        return {RUN_VARIABLE: self.run}

    def new_mark(self) -> str:
        """The run mark of an upstream about to start: this run's id and a number."""
        self._marks += 1
        return f"{self.run}/{self._marks}"

    def launch(self, executable: str, argv: list[str], cwd: str) -> tuple[str, list[str]]:
        """The executable and argv that start C{executable} in a new group, in C{cwd}."""
        python = self._python
        return python, [
            python,
            "-I",
            "-S",
            "-c",
            LAUNCHER,
            cwd,
            str(os.getpid()),
            executable,
            *argv,
        ]

    def signal(self, pid: int, signum: int, *, leader: bool) -> bool:
        """
        Send C{signum} to the group led by C{pid}, and to what the upstream started
        outside it (L{outsiders}); C{False} when nothing received it.

        @param leader: whether C{pid} itself is still running (not yet reaped).  Until
            the launcher has called C{setsid} there is no group yet, and the process
            alone is signalled.
        """
        # Found before the group is signalled: once its processes die, what they started
        # outside it is reparented and no longer descends from them.
        outsiders = self.outsiders(pid)
        reached = self._signal_group(pid, signum, leader=leader)
        for outsider in outsiders:
            with contextlib.suppress(OSError):
                os.kill(outsider, signum)
                reached = True
        return reached

    def _signal_group(self, pid: int, signum: int, *, leader: bool) -> bool:
        try:
            os.killpg(pid, signum)
        except ProcessLookupError:
            if not leader:
                return False
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                return False
        except PermissionError:
            # The number was reused by somebody else's group: it is not ours.
            return False
        return True

    def alive(self, pid: int) -> bool:
        """
        Whether any process is left in the group led by C{pid}, or outside it.

        What the daemon adopted and has ended is waited for first: a zombie is still in
        its group, and would keep the group alive until the next periodic wait.
        """
        reap_adopted()
        return self.signal(pid, 0, leader=False)

    def outsiders(self, pid: int) -> list[int]:
        """
        The live processes of the upstream led by C{pid} that its group does not hold:
        below it in a session of their own, or adopted by the daemon and carrying the
        upstream's mark.  Only for an upstream this daemon runs (C{pid} recorded).
        """
        upstream = self._live.get(pid)
        if upstream is None:
            return []
        found = descendants([pid]) - {pid}
        for root in adopted():
            for process in descendants([root]):
                if mark(process) == upstream:
                    found |= descendants([process])
        return [
            process
            for process in sorted(found)
            if (fields := stat_fields(process)) is not None
            and fields[0] != "Z"
            and int(fields[2]) != pid
        ]

    # Which processes are the upstreams'

    def own_processes(self) -> set[int]:
        """
        The live upstreams and every process below them, and (the daemon being their
        subreaper) what they left to the daemon, below it too.
        """
        return descendants([*self._live, *adopted()])

    def owns_pid(self, pid: int) -> bool:
        """
        Whether C{pid} is one of this daemon's upstream processes or one they started:
        it descends from a running upstream or from what one left to the daemon, or it
        carries this daemon's run mark.
        """
        if pid == os.getpid() or pid <= 0:
            return False
        roots = {*self._live, *adopted()}
        current: int | None = pid
        for _ in range(MAX_CHAIN):
            if current is None or current <= 1 or current == os.getpid():
                break
            if current in roots:
                return True
            current = parent(current)
        carried = mark(pid)
        return carried is not None and run_of(carried) == self.run

    def owns_peer(self, pid: int, since: int | None) -> bool:
        """
        Whether the process C{pid} that connected a unix socket (C{SO_PEERCRED}),
        accepted at C{since} (L{mcpx.upstream.lineage.boot_ticks}), must be taken for
        an upstream's: it is one (L{owns_pid}), or it is no longer there (L{vanished}).
        A client holds its connection while it uses it; a connection whose maker has
        ended was handed on, and an upstream hands one on that way to hide behind a
        pid nothing can be asked about.
        """
        return pid != os.getpid() and (vanished(pid, since) or self.owns_pid(pid))

    def owns_socket(self, inode: int) -> bool:
        """Whether a process of L{own_processes} holds the socket of C{inode}."""
        return any(holds_socket(pid, inode) for pid in self.own_processes())

    # The record

    def record(self, server: str, pid: int, upstream: str | None = None) -> None:
        """
        Note that the group of C{pid} runs C{server} for this daemon, its processes
        marked C{upstream} (L{new_mark}; this run's id by default).
        """
        upstream = self.run if upstream is None else upstream
        self._live[pid] = upstream
        if self.directory is None:
            return
        entry = {"server": server, "pid": pid, "run": self.run, "mark": upstream}
        try:
            self.directory.mkdir(mode=0o700, exist_ok=True)
            (self.directory / f"{pid}.json").write_text(json.dumps(entry))
        except OSError as e:
            _log.warn(
                "cannot record the process group of upstream {server}: {why}",
                server=server,
                why=str(e),
            )

    def forget(self, pid: int) -> None:
        """The group of C{pid} is gone."""
        self._live.pop(pid, None)
        if self.directory is not None:
            with contextlib.suppress(OSError):
                (self.directory / f"{pid}.json").unlink()

    def kill_all(self) -> int:
        """
        C{SIGKILL} every group still running (the stop was hurried), with what each
        left outside it and what the daemon adopted: their processes end now,
        whatever grace period was being waited out.

        @return: how many groups were signalled.
        """
        killed = sum(self.signal(pid, signal.SIGKILL, leader=True) for pid in tuple(self._live))
        if killed:
            _log.warn("killed the process groups of {count} upstream(s)", count=killed)
        self.end_adopted()
        return killed

    def end_adopted(self) -> list[int]:
        """
        C{SIGKILL} every process the daemon adopted and what is below it: what
        upstreams forked and left, once nothing the daemon runs should be left.

        @return: the pids signalled.
        """
        ended = sorted(descendants(adopted()))
        for pid in ended:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if ended:
            _log.warn(
                "killed {count} process(es) that upstreams started and left: {pids}",
                count=len(ended),
                pids=ended,
            )
        return ended

    def reap_strays(self) -> int:
        """
        End the processes that daemons no longer running left (whatever carries
        their run mark, in any session), and remove their records.  Runs once,
        before the daemon serves.

        @return: how many processes were killed.
        """
        if self.directory is None or not self.directory.is_dir():
            return 0
        # The dead runs, and the server each upstream mark (or group leader) was.
        dead: dict[str, dict[str, str]] = {}
        for path in sorted(self.directory.glob("*.json")):
            entry = _read_record(path)
            if entry is None:
                _unlink(path)
                continue
            server, leader, run, upstream = entry
            if run == self.run or _daemon_alive(run):
                continue
            names = dead.setdefault(run, {})
            names[upstream or str(leader)] = server
            _unlink(path)
        if not dead:
            return 0
        strays: dict[str, list[int]] = {}
        for pid in pids():
            carried = mark(pid)
            if carried is None or run_of(carried) not in dead:
                continue
            names = dead[run_of(carried)]
            fields = stat_fields(pid)
            session = "" if fields is None else fields[3]
            server = names.get(carried) or names.get(session) or "(unknown)"
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
                strays.setdefault(server, []).append(int(pid))
        for server, killed in sorted(strays.items()):
            _log.warn(
                "killed {count} process(es) of upstream {server} that a daemon no "
                "longer running left behind: {pids}",
                count=len(killed),
                server=server,
                pids=killed,
            )
        return sum(len(killed) for killed in strays.values())


def _read_record(path: Path) -> tuple[str, int, str, str | None] | None:
    try:
        entry = json.loads(path.read_text())
        server, pid, run = entry["server"], entry["pid"], entry["run"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if type(server) is not str or type(pid) is not int or type(run) is not str:
        return None
    upstream = entry.get("mark")
    return server, pid, run, upstream if type(upstream) is str else None


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _daemon_alive(run: str) -> bool:
    """Whether the daemon of run id C{run} (its pid and start time) is still running."""
    pid, _, started = run.partition(".")
    if not pid.isdigit():
        return False
    recorded = start_time(int(pid))
    if recorded is not None:
        return recorded == started
    # No /proc: whether the pid exists is all there is to go by.
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError as e:
        return e.errno == errno.EPERM
    return True
