"""
The six real MCP servers of the real-server matrix (C{tests/upstream/test_real_matrix.py},
C{bench/bench_real_servers.py}), the data they serve, made here, and the MCP SDK's
client as the host that talks to them or to mcpx.

The servers are installed by C{make test}: C{@modelcontextprotocol/server-filesystem},
C{server-memory} and C{server-sequential-thinking} in C{tests/peers/node_modules};
C{mcp-server-time} and C{mcp-server-git} in the test venv; C{mcp-server-calculator},
which needs C{mcp<2}, in C{.venv-calculator}.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import wave
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import anyio
from attrs import define, frozen
from mcp import StdioServerParameters

from tests.support.daemons import run_daemon
from tests.support.peers import NODE_MODULES, PeersMissing, node22
from tests.support.processes import REPO

T = TypeVar("T")

CALCULATOR_VENV = REPO / ".venv-calculator"
#: The size of the big text file: its text twice (content and structured content)
#: still fits in 64 MiB.
BIG_FILE_SIZE = 30_000_000
_BIG_LINE = b"x" * 999 + b"\n"

#: Answers of the 30 MB file are larger than the daemon's message limit was before it
#: became 64 MiB; the daemons started here set it themselves.
MESSAGE_LIMIT = 128 * 1024 * 1024

#: The six servers, in the order the matrix passes them through.
NAMES = ("filesystem", "memory", "thinking", "time", "git", "calculator")


@frozen
class Data:
    """What the servers serve: a directory tree, a git repository, a memory file."""

    root: Path

    @property
    def tree(self) -> Path:
        return self.root / "tree"

    @property
    def repository(self) -> Path:
        return self.root / "repo"

    @property
    def memory_file(self) -> Path:
        return self.root / "memory.jsonl"


def _png() -> bytes:
    """A 2x2 red PNG."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _git(repository: Path, *arguments: str) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repository.parent),
        "GIT_AUTHOR_NAME": "Ada",
        "GIT_AUTHOR_EMAIL": "ada@example.com",
        "GIT_COMMITTER_NAME": "Ada",
        "GIT_COMMITTER_EMAIL": "ada@example.com",
        "GIT_AUTHOR_DATE": "2026-01-02T03:04:05+00:00",
        "GIT_COMMITTER_DATE": "2026-01-02T03:04:05+00:00",
    }
    subprocess.run(
        ["git", "-C", str(repository), *arguments], env=env, check=True, capture_output=True
    )


def make_data(root: Path) -> Data:
    """Write the matrix's data under C{root} (which must exist)."""
    data = Data(root)
    tree = data.tree
    (tree / "docs").mkdir(parents=True)
    (tree / "notes.txt").write_text("first line\nsecond line\n")
    (tree / "docs" / "readme.md").write_text("# Readme\n\nThe matrix's data.\n")
    (tree / "pixel.png").write_bytes(_png())
    with wave.open(str(tree / "tone.wav"), "wb") as sound:
        sound.setnchannels(1)
        sound.setsampwidth(1)
        sound.setframerate(8000)
        sound.writeframes(bytes(range(256)) * 4)
    with (tree / "big.txt").open("wb") as big:
        for _ in range(BIG_FILE_SIZE // len(_BIG_LINE)):
            big.write(_BIG_LINE)
    repository = data.repository
    repository.mkdir()
    _git(repository, "init", "-q", "-b", "main")
    (repository / "a.txt").write_text("one\n")
    _git(repository, "add", "a.txt")
    _git(repository, "commit", "-q", "-m", "First commit")
    (repository / "a.txt").write_text("one\ntwo\n")
    (repository / "b.txt").write_text("bee\n")
    _git(repository, "add", "a.txt", "b.txt")
    _git(repository, "commit", "-q", "-m", "Second commit")
    (repository / "a.txt").write_text("one\ntwo\nthree\n")
    graph = [
        {"type": "entity", "name": "Ada", "entityType": "person", "observations": ["wrote notes"]},
        {"type": "entity", "name": "Engine", "entityType": "machine", "observations": ["analytic"]},
        {"type": "relation", "from": "Ada", "to": "Engine", "relationType": "programmed"},
    ]
    data.memory_file.write_text("".join(json.dumps(line) + "\n" for line in graph))
    return data


def _require(path: Path, how: str) -> str:
    if not path.exists():
        raise PeersMissing(f"{path} is missing: run `make test`, which {how}")
    return str(path)


def _npm(package: str) -> str:
    return _require(
        NODE_MODULES / "@modelcontextprotocol" / package / "dist" / "index.js",
        "installs the npm test peers",
    )


def _venv_script(name: str) -> str:
    return _require(Path(sys.executable).parent / name, "installs the test dependencies")


def server_configs(data: Data) -> dict[str, dict[str, Any]]:
    """The six servers as a C{servers.json} has them (C{command}, C{args}, C{env})."""
    node = node22()
    calculator = _require(
        CALCULATOR_VENV / "bin" / "mcp-server-calculator", "creates .venv-calculator"
    )
    return {
        "filesystem": {"command": node, "args": [_npm("server-filesystem"), str(data.tree)]},
        "memory": {
            "command": node,
            "args": [_npm("server-memory")],
            "env": {"MEMORY_FILE_PATH": str(data.memory_file)},
        },
        "thinking": {
            "command": node,
            "args": [_npm("server-sequential-thinking")],
            "env": {"DISABLE_THOUGHT_LOGGING": "true"},
        },
        "time": {"command": _venv_script("mcp-server-time"), "args": ["--local-timezone", "UTC"]},
        "git": {
            "command": _venv_script("mcp-server-git"),
            "args": ["--repository", str(data.repository)],
        },
        "calculator": {"command": calculator, "args": []},
    }


def in_worker(conversation: Callable[[], Awaitable[T]], timeout: float = 120.0) -> T:
    """
    Run an SDK conversation on its own event loop in a worker thread and return its
    result; a conversation longer than C{timeout} fails.
    """

    async def bounded() -> T:
        with anyio.fail_after(timeout):
            return await conversation()

    with ThreadPoolExecutor(1) as worker:
        try:
            return worker.submit(anyio.run, bounded).result()
        except BaseExceptionGroup as group:
            # The SDK's task groups wrap a failed assertion: show it, not the group.
            leaf: BaseException = group
            while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
                leaf = leaf.exceptions[0]
            if leaf is group:
                raise
            raise leaf from group


def dumped(model: Any) -> Any:
    """An SDK model as the JSON it stands for (every field it carries, none it lacks)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def wire_env(base: Mapping[str, str]) -> dict[str, str]:
    """
    C{base} for a process the tests start (a daemon, a server asked directly, a host):
    without settings of any mcpx the environment may point at, nor the C{PYTHONPATH}
    that C{trial -j} gives its workers (the test venv's C{sys.path}), which would make a
    Python peer of a venv of its own import the test venv's packages before its own
    (C{mcp} 2.x in place of the C{mcp<2} it is built on, and it exits on import).
    """
    return {k: v for k, v in base.items() if not k.startswith("MCPX_") and k != "PYTHONPATH"}


@define
class Daemon:
    """A running daemon: its process, port and the environment its clients need."""

    process: subprocess.Popen[bytes]
    port: int
    env: dict[str, str]
    log: Path

    @property
    def mcp_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def serve_params(self, *arguments: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable,
            args=["-m", "mcpx", "serve", *arguments],
            env=self.env,
            cwd=str(REPO),
        )

    def post(self, path: str, body: Mapping[str, Any], timeout: float = 60) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
            return json.load(r)

    def cli(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mcpx", *arguments],
            check=False,
            env=self.env,
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def server_pids(self) -> dict[str, int]:
        """The pids of the daemon's upstream processes, by server name."""
        children = _descendants(self.process.pid)
        marks = {
            "filesystem": "server-filesystem",
            "memory": "server-memory",
            "thinking": "server-sequential-thinking",
            "time": "mcp-server-time",
            "git": "mcp-server-git",
            "calculator": "mcp-server-calculator",
        }
        found: dict[str, int] = {}
        for pid in children:
            line = _cmdline(pid)
            for server, mark in marks.items():
                if mark in line:
                    found[server] = pid
        return found

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = _cmdline(pid)
    return bool(stat) or Path(f"/proc/{pid}").exists()


def start_daemon(
    data: Data,
    *,
    passthrough: Sequence[str] = (),
    servers: Mapping[str, Mapping[str, Any]] | None = None,
    **settings: str,
) -> Daemon:
    """
    A daemon serving the six servers (or C{servers}) on a free loopback port; ready when
    it returns.
    """
    home = Path(tempfile.mkdtemp(prefix="mcpx-matrix-"))
    config = home / "servers.json"
    chosen = server_configs(data) if servers is None else servers
    # The matrix holds mcpx to the servers' own answers, so the guard rails that would
    # answer some calls in the servers' place (mcpx/policy: arguments checked against
    # the tool's schema before it is called) stand aside; tests/policy proves them.
    defaults = {"validate": {"input": "off", "output": "off"}}
    config.write_text(json.dumps({"servers": chosen, "serverDefaults": defaults}))
    env = wire_env(os.environ)
    env.update(
        MCPX_STATE_DIR=str(home / "state"),
        XDG_CONFIG_HOME=str(home),
        MCPX_CONFIG=str(config),
        MCPX_TRANSPORT_MAX_MESSAGE_SIZE=str(MESSAGE_LIMIT),
        MCPX_MCP_PASSTHROUGH=",".join(passthrough),
        **settings,
    )
    log = home / "daemon.log"
    process, port = run_daemon(env, log, cwd=str(REPO))
    daemon = Daemon(process, port, env, log)
    atexit.register(daemon.stop)
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return daemon
