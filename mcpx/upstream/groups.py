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
which every upstream carries in its environment as C{MCPX_DAEMON_RUN}.  A starting
daemon reads the records a dead daemon left and kills the processes of those sessions
that carry that daemon's run id: the run id is what proves that a process in a session
whose number has since been reused is really one of ours.  Finding them needs C{/proc};
elsewhere the records are only removed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import signal
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from twisted.logger import Logger

#: The environment variable that marks an upstream (and what it forks) as this daemon's.
RUN_VARIABLE: Final = "MCPX_DAEMON_RUN"

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

_PROC: Final = Path("/proc")

_log = Logger()


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of C{/proc/<pid>/stat} after the command name, or C{None}."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold anything: the rest follows the last ")".
    return text[text.rindex(")") + 2 :].split()


def start_time(pid: int) -> str | None:
    """When C{pid} started, in clock ticks since boot (C{/proc}), or C{None}."""
    fields = _stat_fields(pid)
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
        #: The leaders of the groups started and not yet gone.
        self._live: set[int] = set()

    @property
    def marker(self) -> Mapping[str, str]:
        """The variable every upstream of this daemon carries."""
        return {RUN_VARIABLE: self.run}

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
        Send C{signum} to the group led by C{pid}; C{False} when nothing received it.

        @param leader: whether C{pid} itself is still running (not yet reaped).  Until
            the launcher has called C{setsid} there is no group yet, and the process
            alone is signalled.
        """
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
        """Whether any process is left in the group led by C{pid}."""
        return self.signal(pid, 0, leader=False)

    # The record

    def record(self, server: str, pid: int) -> None:
        """Note that the group of C{pid} runs C{server} for this daemon."""
        self._live.add(pid)
        if self.directory is None:
            return
        entry = {"server": server, "pid": pid, "run": self.run}
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
        self._live.discard(pid)
        if self.directory is not None:
            with contextlib.suppress(OSError):
                (self.directory / f"{pid}.json").unlink()

    def kill_all(self) -> int:
        """
        C{SIGKILL} every group still running (the stop was hurried): their processes
        end now, whatever grace period was being waited out.

        @return: how many groups were signalled.
        """
        killed = sum(self.signal(pid, signal.SIGKILL, leader=True) for pid in tuple(self._live))
        if killed:
            _log.warn("killed the process groups of {count} upstream(s)", count=killed)
        return killed

    def reap_strays(self) -> int:
        """
        End the processes that daemons no longer running left in their recorded
        groups, and remove those records.  Runs once, before the daemon serves.

        @return: how many processes were killed.
        """
        if self.directory is None or not self.directory.is_dir():
            return 0
        killed = 0
        sessions: dict[str, list[str]] | None = None
        for path in sorted(self.directory.glob("*.json")):
            entry = _read_record(path)
            if entry is None:
                _unlink(path)
                continue
            server, leader, run = entry
            if run == self.run or _daemon_alive(run):
                continue
            if sessions is None:
                sessions = _sessions()
            strays = [int(pid) for pid in sessions.get(str(leader), ()) if _carries(pid, run)]
            for pid in strays:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if strays:
                killed += len(strays)
                _log.warn(
                    "killed {count} process(es) of upstream {server} that a daemon no "
                    "longer running left behind: {pids}",
                    count=len(strays),
                    server=server,
                    pids=strays,
                )
            _unlink(path)
        return killed


def _read_record(path: Path) -> tuple[str, int, str] | None:
    try:
        entry = json.loads(path.read_text())
        server, pid, run = entry["server"], entry["pid"], entry["run"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if type(server) is not str or type(pid) is not int or type(run) is not str:
        return None
    return server, pid, run


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


def _sessions() -> dict[str, list[str]]:
    """Every visible process by its session id."""
    found: dict[str, list[str]] = {}
    for pid in _pids():
        fields = _stat_fields(pid)
        if fields is not None and fields[0] != "Z":
            # Field 6 of stat, the session id.
            found.setdefault(fields[3], []).append(pid)
    return found


def _pids() -> Iterator[str]:
    try:
        entries = os.listdir(_PROC)
    except OSError:
        return
    for entry in entries:
        if entry.isdigit():
            yield entry


def _carries(pid: str, run: str) -> bool:
    """Whether process C{pid} was started with C{MCPX_DAEMON_RUN=run}."""
    try:
        environ = (_PROC / pid / "environ").read_bytes()
    except OSError:
        return False
    return f"{RUN_VARIABLE}={run}".encode() in environ.split(b"\0")
