"""
The opt-in CPython mode (C{exec.mode: cpython}) on a real daemon: the program runs under
the real interpreter with the daemon's libraries, its calls reach the servers over the
daemon's socket as the run's (C{X-Mcpx-Run}), it is confined where the machine allows,
and a timeout ends its whole process group, children included.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import treq
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase
from twisted.web.http_headers import Headers

from tests.questions.support import Daemon, demo_server
from tests.support.http import TestClient
from tests.support.processes import reactor

TWENTY_CALLS = """\
import asyncio
import attrs  # one of the daemon's own libraries: this is the real interpreter

rows = await asyncio.gather(*[(demo if i % 2 else other).add(a=i, b=1) for i in range(20)])
with open("sums.txt", "w") as f:
    f.write(",".join(str(r["sum"]) for r in rows))
print("made", len(rows), "calls")
{"total": sum(r["sum"] for r in rows), "attrs": attrs.__name__}
"""

#: A program that starts a child and outlives any timeout; the child's argv marks it.
LINGERS = """\
import subprocess, time
subprocess.Popen(["sleep", "61.75"])
print("started", flush=True)
time.sleep(60)
"""

NETWORK = """\
import socket
names = sorted(name for _, name in socket.if_nameindex())
try:
    socket.create_connection(("192.0.2.1", 9), timeout=1).close()
    reached = True
except OSError:
    reached = False
{"interfaces": names, "reached": reached}
"""


def _confinement_works() -> bool:
    unshare = shutil.which("unshare")
    if shutil.which("bwrap"):
        return True
    if unshare is None:
        return False
    done = subprocess.run([unshare, "--user", "--map-root-user", "--net", "true"], check=False)
    return done.returncode == 0


def _processes_with_argv(argv: list[bytes]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            seen = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if seen == argv and state != "Z":
            found.append(int(entry.name))
    return found


class CPythonModeTests(TestCase):
    timeout = 120

    async def daemon(self) -> Daemon:
        servers = {"demo": demo_server(), "other": demo_server()}
        return await Daemon(self, servers, settings={"MCPX_EXEC_MODE": "cpython"}).start()

    async def post(
        self, daemon: Daemon, path: str, body: object, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        client = TestClient(reactor, unix_socket=daemon.socket)
        sent = {"Content-Type": ["application/json"]}
        sent.update({name: [value] for name, value in (headers or {}).items()})
        try:
            response = await client.http.post(
                f"http://mcpx{path}", data=json.dumps(body).encode(), headers=Headers(sent)
            )
            answer = json.loads(await treq.content(response))
        finally:
            await client.close()
        return response.code, answer

    async def test_twenty_calls_through_the_socket_with_real_libraries(self) -> None:
        daemon = await self.daemon()
        code, answer = await self.post(daemon, "/v1/exec", {"program": TWENTY_CALLS})
        self.assertEqual(code, 200, answer)
        self.assertEqual(answer["result"], {"total": 210, "attrs": "attrs"})
        self.assertEqual(answer["output"], "made 20 calls\n")
        [artifact] = answer["artifacts"]
        self.assertTrue(artifact["uri"].endswith("/sums.txt"), artifact)
        self.assertTrue(artifact["description"].startswith("1,2,3"), artifact)

    async def test_confined_without_network(self) -> None:
        """On this machine unshare (or bwrap) works: the program has no network."""
        self.assertTrue(_confinement_works(), "this test expects bwrap or unshare to work")
        daemon = await self.daemon()
        code, answer = await self.post(daemon, "/v1/exec", {"program": NETWORK})
        self.assertEqual(code, 200, answer)
        self.assertEqual(answer["result"], {"interfaces": ["lo"], "reached": False})

    async def test_timeout_kills_the_program_and_its_children(self) -> None:
        daemon = await self.daemon()
        marker = [b"sleep", b"61.75"]
        code, answer = await self.post(daemon, "/v1/exec", {"program": LINGERS, "timeoutSec": 3})
        self.assertEqual(code, 504, answer)
        self.assertEqual(answer["error"]["code"], "timeout")
        self.assertIn("started", answer["error"]["message"])
        for _ in range(100):
            if not _processes_with_argv(marker):
                break
            await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(_processes_with_argv(marker), [])

    async def test_a_call_with_a_run_that_is_not_running_is_refused(self) -> None:
        daemon = await self.daemon()
        code, answer = await self.post(
            daemon,
            "/v1/call",
            {"server": "demo", "tool": "add", "arguments": {"a": 1, "b": 2}},
            {"X-Mcpx-Run": "run-000000000000", "X-Mcpx-Run-Key": "guess"},
        )
        self.assertEqual(code, 403, answer)
        self.assertEqual(answer["error"]["code"], "unknown_run")

    async def test_syntax_error_and_failure_are_reported(self) -> None:
        daemon = await self.daemon()
        code, answer = await self.post(daemon, "/v1/exec", {"program": "def f(:\n"})
        self.assertEqual((code, answer["error"]["code"]), (400, "program_syntax"), answer)
        code, answer = await self.post(
            daemon, "/v1/exec", {"program": 'print("so far")\nawait demo.fail()'}
        )
        self.assertEqual((code, answer["error"]["code"]), (422, "program_failed"), answer)
        self.assertIn("so far", answer["error"]["message"])
        self.assertIn("demo.fail", answer["error"]["message"])
