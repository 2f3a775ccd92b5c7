"""
A real C{mcpx daemon} for a test, and requests sent to it from a process of their own
(as another local user, when asked).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from tests.support.processes import (
    REPO,
    ChildProcess,
    free_tcp_port,
    kill_on_cleanup,
    reactor,
    spawn,
)

#: The plain HTTP client the probes run (standard library only, so any user can run it).
PROBE = str(REPO / "tests" / "support" / "raw_http.py")
#: The user the other-user probes run as.
NOBODY = 65534
#: An interpreter another user can reach (the venv's may sit under a 0700 home).
OTHER_USER_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable


def daemon_environ(state_dir: str, config_home: str) -> dict[str, str]:
    """The environment of a daemon with its own state and no configuration file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
    env["MCPX_STATE_DIR"] = state_dir
    env["XDG_CONFIG_HOME"] = config_home
    return env


def daemon_argv(port: int, *flags: str, listen_options: str = "") -> list[str]:
    """C{mcpx daemon} on loopback TCP C{port} (and its unix socket), with C{flags}."""
    listen = f"tcp:{port}:interface=127.0.0.1{listen_options}"
    return [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", listen, *flags]


def run_daemon(
    env: Mapping[str, str], log: Path, *, cwd: str | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """
    Start L{daemon_argv} on a free loopback port in C{env}, outside the reactor (so it
    may outlive the test that started it), its output written to C{log}; once it runs.
    The caller stops it.

    @return: its process and its port.
    """
    port = free_tcp_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            daemon_argv(port),
            env=dict(env),
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 30
    while b"daemon is running" not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise AssertionError(f"the daemon did not start: {log.read_text()}")
        time.sleep(0.05)
    return process, port


async def start_daemon(
    test: TestCase,
    env: Mapping[str, str],
    port: int,
    *flags: str,
    ready: bytes = rb"upstream servers: ",
    cwd: str | None = None,
) -> ChildProcess:
    """
    Start L{daemon_argv} in C{env}, stopped by L{stop_daemon} when C{test} ends; once it
    has written C{ready}.
    """
    child = spawn(daemon_argv(port, *flags), env=env, cwd=cwd)
    test.addCleanup(stop_daemon, child)
    await child.wait_for(ready)
    return child


async def stop_daemon(child: ChildProcess, timeout: float = 20) -> None:
    """Stop the daemon as a user would (TERM), so it ends its servers too; KILL if it lingers."""
    if child.exit_code is None:
        child.signal("TERM")
        try:
            await child.ended(timeout=timeout)
        finally:
            kill_on_cleanup(child)


def readable_copy(path: str) -> str:
    """A copy of C{path} every user can read, in a folder of its own that goes at exit."""
    folder = tempfile.mkdtemp(prefix="mcpx-probe-")
    atexit.register(shutil.rmtree, folder, True)
    os.chmod(folder, 0o755)
    copy = os.path.join(folder, os.path.basename(path))
    shutil.copyfile(path, copy)
    os.chmod(copy, 0o644)
    return copy


async def probe(
    test: TestCase,
    env: Mapping[str, str],
    requests: list[dict[str, Any]],
    uid: int | None = None,
    timeout: float = 60,
) -> Any:
    """
    Send C{requests} (see L{tests.support.raw_http}) from a process of its own, as user
    C{uid} when given; the answers.
    """
    child = ChildProcess(reactor)
    python, kwargs, script = sys.executable, {}, PROBE
    if uid is not None:
        # The probe needs only the standard library; the venv's interpreter may sit
        # where another user cannot reach it (under /root), and so may the checkout
        # (a 0700 home): that user runs a copy of its own.
        python, kwargs = OTHER_USER_PYTHON, {"uid": uid, "gid": uid}
        script = readable_copy(PROBE)
    # -I: the probe's folder, tests/support, holds an http.py of its own.
    args = [python, "-I", script, json.dumps(requests)]
    reactor.spawnProcess(child, python, args, env=dict(env), path="/", **kwargs)
    test.addCleanup(kill_on_cleanup, child)
    code = await child.ended(timeout)
    test.assertEqual(code, 0, child.text())
    return json.loads(child.text(1))


def reap_on_cleanup(test: TestCase, child: ChildProcess) -> None:
    """KILL C{child} when C{test} ends, and wait for it to be gone."""

    def reap() -> Deferred[int] | None:
        kill_on_cleanup(child)
        return child.ended() if child.exit_code is None else None

    test.addCleanup(reap)


def rss_bytes(pid: int) -> int:
    """The resident memory of process C{pid} (VmRSS), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")
