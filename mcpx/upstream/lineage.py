# -*- test-case-name: tests.upstream.test_lineage -*-
"""
Which processes are the daemon's own upstreams' (Linux C{/proc}), and the daemon as
their subreaper.

A stdio server runs as the daemon's user, so the uid of a socket (or the file mode of
the unix socket) cannot tell it from the user: the gate asks this module instead
whether the process at the other end of a connection is one of the upstream
processes, or one they started (L{mcpx.daemon.gate}).  A process is the upstreams'
when:

 - it descends from a running upstream (the launcher's pid, which the server's
   command replaced), whatever session or group it moved to: its parent chain is
   the kernel's and a process cannot rewrite it;
 - it descends from a process the daemon adopted (below): something an upstream
   forked and left; or
 - it still carries this daemon's run mark (C{MCPX_DAEMON_RUN}, L{mcpx.upstream.groups})
   in the environment it was started with.

B{Not dumpable.}  The daemon makes itself non-dumpable (L{become_undumpable}), so the
upstreams, running as its user, cannot read its environment from C{/proc} or attach
to it.

B{Subreaper.}  Once the daemon is its descendants' subreaper (C{PR_SET_CHILD_SUBREAPER},
L{become_subreaper}) what an upstream forked and left (a helper that called
C{setsid} and whose parent exited) becomes the daemon's child rather than init's, so
the chain above still ends at the daemon.  Those children are told from the ones the
daemon started by Twisted's own list of the processes it waits for
(C{twisted.internet.process.reapProcessHandlers}); Twisted waits only for those, so
L{reap_adopted} waits for the others once they have ended, and never takes the exit
status of a process Twisted waits for.

Everything here reads small files in memory, never waits on a disk, and is asked once
per connection (the gate keeps the answer on the connection).  Without C{/proc} the
answers are "no" and the daemon relies on the socket's permissions alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from twisted.internet import process as twisted_process

#: The environment variable that marks an upstream (and what it forks) as this daemon's.
RUN_VARIABLE: Final = "MCPX_DAEMON_RUN"

#: C{prctl} options (Linux, C{<linux/prctl.h>}).
PR_SET_CHILD_SUBREAPER: Final = 36
PR_GET_CHILD_SUBREAPER: Final = 37
PR_GET_DUMPABLE: Final = 3
PR_SET_DUMPABLE: Final = 4

#: How many parents a chain is followed up before it is given up on (a chain is
#: rarely longer than a dozen; the bound keeps a reused pid from looping).
MAX_CHAIN: Final = 256

#: How often, in seconds, the daemon waits for the processes it adopted that have
#: ended: until then each stays in the process table as a zombie, holding nothing else.
REAP_INTERVAL: Final = 5.0

_PROC: Final = Path("/proc")
#: Where a process's start time (field 22 of C{/proc/<pid>/stat}) is in L{stat_fields}.
_STARTTIME: Final = 19


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of C{/proc/<pid>/stat} after the command name, or C{None}."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold anything: the rest follows the last ")".
    return text[text.rindex(")") + 2 :].split()


def pids() -> Iterator[str]:
    """Every process visible in C{/proc}."""
    try:
        entries = os.listdir(_PROC)
    except OSError:
        return
    for entry in entries:
        if entry.isdigit():
            yield entry


def parent(pid: int) -> int | None:
    """The parent of C{pid}, or C{None} when it is gone (or a zombie)."""
    fields = stat_fields(pid)
    if fields is None or fields[0] == "Z":
        return None
    return int(fields[1])


def children(pid: int) -> list[int]:
    """
    The children of C{pid}: from C{/proc/<pid>/task/*/children} where the kernel
    keeps it, else from every process's parent.
    """
    found: list[int] = []
    try:
        tasks = os.listdir(_PROC / str(pid) / "task")
    except OSError:
        return found
    listed = False
    for task in tasks:
        try:
            text = (_PROC / str(pid) / "task" / task / "children").read_text()
        except OSError:
            continue
        listed = True
        found.extend(int(child) for child in text.split())
    if listed:
        return found
    return [int(entry) for entry in pids() if parent(int(entry)) == pid]


def descendants(roots: Iterable[int]) -> set[int]:
    """C{roots} and every process below them."""
    seen: set[int] = set()
    waiting = list(roots)
    while waiting:
        pid = waiting.pop()
        if pid in seen:
            continue
        seen.add(pid)
        waiting.extend(children(pid))
    return seen


def boot_ticks() -> int | None:
    """
    Now, in the clock ticks since boot that C{/proc/<pid>/stat} counts a process's
    start in; C{None} where the system does not say.
    """
    if not hasattr(time, "CLOCK_BOOTTIME"):
        return None
    try:
        return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return None


def vanished(pid: int, since: int | None = None) -> bool:
    """
    Whether the process C{pid} that connected a socket is no longer there to hold
    it: it has ended (or is a zombie), or the pid now names a process started after
    C{since} (L{boot_ticks} when the connection was accepted), which cannot have
    connected it.  C{False} where C{/proc} does not say.
    """
    fields = stat_fields(pid)
    if fields is None:
        # Gone, unless there is no /proc to ask at all.
        return stat_fields("self") is not None
    if fields[0] in ("Z", "X"):
        return True
    try:
        started = int(fields[_STARTTIME])
    except (IndexError, ValueError):
        return False
    # A tick of slack: the two counts are rounded apart.
    return since is not None and started > since + 1


def mark(pid: int | str) -> str | None:
    """The run mark C{pid} was started with, or C{None}."""
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    prefix = f"{RUN_VARIABLE}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("ascii", "replace")
    return None


def run_of(value: str) -> str:
    """The daemon's run id in a run mark (C{<run>/<upstream>}, or the run alone)."""
    return value.partition("/")[0]


def holds_socket(pid: int, inode: int) -> bool:
    """Whether one of C{pid}'s descriptors is the socket of C{inode}."""
    target = f"socket:[{inode}]"
    directory = _PROC / str(pid) / "fd"
    try:
        descriptors = os.listdir(directory)
    except OSError:
        return False
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            if os.readlink(directory / descriptor) == target:
                return True
    return False


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


def become_subreaper() -> bool:
    """
    Make this process the subreaper of its descendants (Linux): what they leave
    when their parent exits becomes its child rather than init's.  The setting is
    not inherited by children, and lasts until the process exits.

    @return: whether it is now the subreaper.
    """
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def become_undumpable() -> bool:
    """
    Make this process non-dumpable (Linux, C{PR_SET_DUMPABLE} 0): its C{/proc}
    files that tell more than its name and state (C{environ}, C{fd}, C{maps},
    C{mem}...) become root's, and another process of the same user can neither read
    them nor C{ptrace} it.  The daemon's environment holds what the servers'
    C{${VAR}} references and the store's password are read from, and a stdio server
    runs as the same user.  No core dump is written either.  Lasts until an
    C{execve}; a child the daemon starts is dumpable again.

    @return: whether it is now non-dumpable.
    """
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def is_dumpable() -> bool:
    """Whether this process is dumpable (C{True} where the system does not say)."""
    prctl = _prctl()
    return prctl is None or prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0


def is_subreaper() -> bool:
    """Whether this process is the subreaper of its descendants."""
    prctl = _prctl()
    if prctl is None:
        return False
    value = ctypes.c_int(0)
    return prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) == 0 and bool(value.value)


def started_by_twisted(pid: int) -> bool:
    """Whether Twisted started C{pid} and will wait for it (C{spawnProcess})."""
    return pid in twisted_process.reapProcessHandlers


def adopted() -> list[int]:
    """
    The live children of this process it did not start: what its descendants left
    when their parent exited (only once it is their subreaper).
    """
    if not is_subreaper():
        return []
    return [
        pid
        for pid in children(os.getpid())
        if not started_by_twisted(pid) and parent(pid) is not None
    ]


def reap_adopted() -> list[int]:
    """
    Wait for the children this process adopted that have ended (zombies), so none
    stays in the process table; a process Twisted started is left to Twisted.  Only
    once this process is their subreaper: before that, its only children are its own.

    @return: the pids waited for.
    """
    reaped: list[int] = []
    if not is_subreaper():
        return reaped
    for pid in children(os.getpid()):
        fields = stat_fields(pid)
        if fields is None or fields[0] != "Z" or started_by_twisted(pid):
            continue
        with contextlib.suppress(ChildProcessError, OSError):
            done, _status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                reaped.append(pid)
    return reaped
