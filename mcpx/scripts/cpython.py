# -*- test-case-name: tests.scripts.test_cpython -*-
"""
The opt-in full-CPython mode (C{exec.mode: cpython}): the program runs under the real
interpreter, with whatever libraries it can import, as the daemon's user.

What a run is made of, in a private directory of its own (C{<state>/exec/<run>/}):

 - C{program.py}, the program as given;
 - C{mcpx_client.py}, generated for the run: the daemon's unix socket, the run's id and
   key, the server names; every tool call is a C{POST /v1/call} on that socket carrying
   C{X-Mcpx-Run} (and the run's secret C{X-Mcpx-Run-Key}), so the daemon makes it as the
   run's caller, counts it against C{exec.maxCalls} and bounds it by what is left of the
   run;
 - C{_mcpx_main.py}, which runs the program (top-level C{await} allowed, the last
   expression its result) and reports how it ended on file descriptor 3.

The process the daemon starts is a small launcher (L{BOOT}): it makes itself a process
group leader and asks to die with the daemon, sets resource limits, then C{exec}s the
interpreter under the confinement the machine offers: C{bwrap} (read-only root, no
network, a private C{/tmp}, the run's artifacts directory the only writable place) when
it is installed, else C{unshare} (no network, own PID namespace) when user namespaces
work, else nothing. The first line on descriptor 3 says which (C{{"confinement": ...}}).
The daemon kills the whole group however the run ends.

Never imported by the child: the child sees only the files written here.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from attrs import frozen

#: Where the CPython-mode runs' own files live, in the state directory.
EXEC_DIRECTORY: Final = "exec"

#: The launcher, run as C{python -I -c BOOT <settings json>}: no Twisted, no mcpx.
BOOT: Final = r"""
import ctypes, json, os, resource, shutil, signal, subprocess, sys
conf = json.loads(sys.argv[1])
os.setsid()
try:
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
except Exception:
    pass
for name, value in (("RLIMIT_DATA", conf["memory"]), ("RLIMIT_CPU", conf["cpu"]),
                    ("RLIMIT_FSIZE", conf["fileBytes"]), ("RLIMIT_CORE", 0)):
    try:
        resource.setrlimit(getattr(resource, name), (value, value))
    except (ValueError, OSError):
        pass
program = [conf["python"], "-u", "-X", "utf8", conf["main"], conf["program"]]
how, prefix = "none", []
bwrap = shutil.which("bwrap")
unshare = shutil.which("unshare")
def works(argv):
    try:
        return subprocess.run(argv + ["true"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=5).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
if bwrap:
    candidate = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                 "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent",
                 "--bind", conf["runDir"], conf["runDir"], "--bind", conf["out"], conf["out"],
                 "--chdir", conf["out"]]
    if works(candidate):
        how, prefix = "bwrap", candidate
if how == "none" and unshare:
    candidate = [unshare, "--user", "--map-root-user", "--net", "--pid", "--fork",
                 "--kill-child", "--mount", "--mount-proc"]
    if works(candidate):
        how, prefix = "unshare", candidate
os.write(3, (json.dumps({"confinement": how}) + "\n").encode())
os.chdir(conf["out"])
argv = prefix + program
os.execv(argv[0], argv)
"""

#: Runs the program and reports how it ended on descriptor 3.
MAIN: Final = r'''"""Runs program.py for mcpx (the CPython mode of mcpx_exec)."""
import ast, asyncio, json, os, sys, traceback


def _send(message):
    os.write(3, (json.dumps(message) + "\n").encode())


def _close_stdout():
    # Before the end is reported: the daemon takes all the output until stdout closes.
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    os.close(1)


def main():
    path = sys.argv[1]
    with open(path, encoding="utf-8") as f:
        source = f.read()
    try:
        tree = ast.parse(source, "program.py")
    except SyntaxError as e:
        _send({"failed": {"kind": "syntax", "message": f"{e.msg} (line {e.lineno})"}})
        return
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1]
        tree.body[-1] = ast.Assign(
            targets=[ast.Name("__mcpx_result__", ast.Store())], value=last.value
        )
        ast.copy_location(tree.body[-1], last)
        ast.fix_missing_locations(tree)
    code = compile(tree, "program.py", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import mcpx_client

    namespace = {"__name__": "__main__", **mcpx_client.namespace()}
    try:
        ran = eval(code, namespace)
        if asyncio.iscoroutine(ran):
            asyncio.run(ran)
    except BaseException as e:  # the program's own failure, reported as such
        shown = traceback.format_exception_only(type(e), e)[-1].strip()
        _close_stdout()
        _send({"failed": {"kind": "runtime", "message": shown}})
        return
    _close_stdout()
    value = namespace.get("__mcpx_result__")
    try:
        _send({"done": {"json": value}})
    except (TypeError, ValueError):
        _send({"done": {"repr": repr(value)}})


main()
'''

#: The client module's fixed part; the run's constants are written above it.
CLIENT: Final = r'''
import asyncio, http.client, json, socket


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self):
        super().__init__("mcpx", timeout=None)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(SOCKET)


def call_sync(server, tool, arguments=None):
    """Call one tool through the daemon, as this run; its value, or RuntimeError."""
    body = json.dumps({"server": server, "tool": tool, "arguments": arguments or {}})
    connection = _UnixConnection()
    try:
        connection.request(
            "POST",
            "/v1/call",
            body=body.encode(),
            headers={"Content-Type": "application/json", "X-Mcpx-Run": RUN,
                     "X-Mcpx-Run-Key": KEY},
        )
        response = connection.getresponse()
        answer = json.loads(response.read() or b"{}")
    finally:
        connection.close()
    if response.status != 200:
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        raise RuntimeError(error.get("message", f"the daemon answered {response.status}"))
    blocks = answer.get("content") or []
    texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
    if answer.get("isError"):
        raise RuntimeError(f"{server}.{tool}: " + ("\n".join(texts) or "the tool failed"))
    if "structuredContent" in answer:
        return answer["structuredContent"]
    if len(texts) == len(blocks):
        return "\n".join(texts)
    return blocks


async def call(server, tool, arguments=None):
    """Call one tool; several may be awaited at once (asyncio.gather)."""
    return await asyncio.to_thread(call_sync, server, tool, arguments)


class Server:
    """One configured server: each tool an async method taking keyword arguments."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, tool):
        if tool.startswith("__"):
            raise AttributeError(tool)

        async def method(**arguments):
            return await call(self._name, tool, arguments)

        method.__name__ = tool
        return method


def namespace():
    found = {"call": call, "call_sync": call_sync, "SERVERS": list(SERVERS), "OUT": OUT}
    found.update({name: Server(name) for name in SERVERS if name.isidentifier()})
    found.update(INPUTS)
    return found
'''


@frozen
class RunClient:
    """What a run's C{mcpx_client} module is made with: where and as whom it calls back."""

    socket: str
    run: str
    key: str
    servers: tuple[str, ...]
    out: str
    inputs: Mapping[str, Any]


def client_module(client: RunClient) -> str:
    """The source of the run's C{mcpx_client} module."""
    constants = "".join(
        f"{name} = {value!r}\n"
        for name, value in (
            ("SOCKET", client.socket),
            ("RUN", client.run),
            ("KEY", client.key),
            ("SERVERS", client.servers),
            ("OUT", client.out),
        )
    )
    # JSON, not repr: the inputs come from the caller and are data.
    inputs_line = f"INPUTS = json.loads({json.dumps(json.dumps(dict(client.inputs)))})\n"
    return (
        '"""mcpx\'s client for one run (generated)."""\nimport json\n'
        + constants
        + inputs_line
        + CLIENT
    )


def prepare(run_dir: Path, program: str, client: RunClient) -> tuple[str, str]:
    """Write the run's files; the paths of its main module and of its program."""
    run_dir.mkdir(parents=True, mode=0o700)
    main = run_dir / "_mcpx_main.py"
    main.write_text(MAIN, encoding="utf-8")
    (run_dir / "mcpx_client.py").write_text(client_module(client), encoding="utf-8")
    source = run_dir / "program.py"
    source.write_text(program, encoding="utf-8")
    return str(main), str(source)


def launch_argv(python: str, conf: Mapping[str, Any]) -> list[str]:
    """The launcher's command line."""
    return [python, "-I", "-c", BOOT, json.dumps(dict(conf))]


def child_environment() -> dict[str, str]:
    """What the program's process inherits: a bare environment, no daemon variables."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": os.environ.get("HOME", "/"),
    }


def remove(run_dir: Path) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)


def clear(scratch: Path) -> None:
    """Forget the files of runs before this daemon, and make the directory private."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
