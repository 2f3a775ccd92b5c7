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
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock, deferLater
from twisted.internet.testing import MemoryReactor
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.http_headers import Headers

from mcpx.call import Call
from mcpx.scripts.outcome import RunFailed, RunRefusedCall, UnknownRun
from mcpx.scripts.run import OUTPUT_GRACE, CPythonChild, Limits, Run
from mcpx.scripts.runner import Scripts
from tests.questions.support import Daemon, demo_server
from tests.scripts.test_runner import FakePool
from tests.support.http import TestClient
from tests.support.processes import reactor

TWENTY_CALLS = """\
import asyncio
import attrs  # one of the daemon's own libraries: this is the real interpreter

rows = await asyncio.gather(*[(demo if i % 2 else other).add(a=i, b=1) for i in range(n)])
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


def _spawns_nothing() -> Any:
    """A reactor that spawns nothing (these tests start no process)."""
    return MemoryReactor()


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
        code, answer = await self.post(
            daemon, "/v1/exec", {"program": TWENTY_CALLS, "inputs": {"n": 20}}
        )
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

    async def test_all_of_a_long_output_comes_before_the_result(self) -> None:
        daemon = await self.daemon()
        program = 'for i in range(5000):\n    print(f"line {i:05d}")\n"end"'
        code, answer = await self.post(daemon, "/v1/exec", {"program": program})
        self.assertEqual(code, 200, answer)
        lines = answer["output"].splitlines()
        self.assertEqual((len(lines), lines[0], lines[-1]), (5000, "line 00000", "line 04999"))
        self.assertEqual(answer["result"], "end")

    async def test_a_question_waits_under_the_run_and_its_answer_goes_on(self) -> None:
        """Run membership over the socket: the tool's question is the run's."""
        daemon = await self.daemon()
        program = 'r = await demo.ask(question="Who?")\nr'
        code, started = await self.post(daemon, "/v1/exec", {"program": program, "task": True})
        self.assertEqual(code, 202, started)
        run, task_id = started["run"], started["task"]["id"]
        for _ in range(400):
            listed = (await daemon.api(f"/v1/questions?run={run}"))["questions"]
            if listed:
                break
            await deferLater(reactor, 0.05, lambda: None)
        [question] = listed
        code, _ = await self.post(
            daemon,
            f"/v1/questions/{question['id']}/answer",
            {"action": "accept", "content": {"answer": "Grace"}},
        )
        self.assertEqual(code, 200)
        for _ in range(400):
            task = await daemon.api(f"/v1/tasks/{task_id}")
            if task["status"] != "working":
                break
            await deferLater(reactor, 0.05, lambda: None)
        self.assertEqual(task["status"], "completed", task)
        self.assertIn("Grace", json.dumps(task["result"]))

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


class OutputOrderTests(SynchronousTestCase):
    """
    The end of a CPython-mode program comes on descriptor 3, its output on stdout; the
    reactor may read the end first, and the output must not be cut for it.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        scripts = Scripts(_spawns_nothing(), self.clock, lambda: None, Limits())
        self.ran = Run("run-1", "me", Call("run-1", {}), scripts, Limits(), 0.0, 100.0)
        self.child = CPythonChild(self.ran, 1 << 20)

    def test_output_read_after_the_end_is_kept(self) -> None:
        self.child.childDataReceived(3, b'{"done": {"json": 1}}\n')
        self.assertNoResult(self.ran.outcome)
        self.child.childDataReceived(1, "late é\n".encode()[:-2])
        self.child.childDataReceived(1, "late é\n".encode()[-2:])
        self.child.childConnectionLost(1)
        outcome = self.successResultOf(self.ran.outcome)
        self.assertEqual((outcome.output, outcome.value), ("late é\n", 1))

    def test_a_stdout_held_open_waits_only_the_grace(self) -> None:
        """A child the program started keeps stdout open: the run ends all the same."""
        self.child.childDataReceived(1, b"printed\n")
        self.child.childDataReceived(3, b'{"done": {"json": "x"}}\n')
        self.clock.advance(OUTPUT_GRACE - 0.01)
        self.assertNoResult(self.ran.outcome)
        self.clock.advance(0.02)
        self.assertEqual(self.successResultOf(self.ran.outcome).output, "printed\n")


class CallInRunTests(SynchronousTestCase):
    """A CPython-mode program's call over the socket is its run's, counted and bounded."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.pool = FakePool()
        # Answered at once: no reactor turns in a synchronous test.
        self.pool.hold = succeed(None)
        pool: Any = self.pool
        self.scripts = Scripts(
            _spawns_nothing(), self.clock, lambda: pool, Limits(calls=2, call_timeout=30.0)
        )
        self.call_of_run = Call("run-1", {})
        self.ran = Run("run-1", "alice", self.call_of_run, self.scripts, self.scripts.limits, 0, 10)
        self.ran.key = "k" * 32
        self.scripts.runs["run-1"] = self.ran

    def call(self, key: str = "k" * 32, run: str = "run-1") -> Deferred[dict[str, Any]]:
        return Deferred.fromCoroutine(
            self.scripts.call_in_run(
                run, key, server="demo", tool="add", arguments={"a": 1, "b": 2}
            )
        )

    def test_made_as_the_run_bounded_by_what_is_left(self) -> None:
        self.clock.advance(4)
        self.successResultOf(self.call())
        [(server, tool, arguments, caller, timeout)] = self.pool.calls
        self.assertEqual((server, tool, arguments), ("demo", "add", {"a": 1, "b": 2}))
        self.assertIs(caller, self.call_of_run)
        self.assertEqual(timeout, 6)

    def test_wrong_key_or_ended_run_is_unknown(self) -> None:
        self.failureResultOf(self.call(key="guess"), UnknownRun)
        self.failureResultOf(self.call(run="run-2"), UnknownRun)
        self.ran.finished = True
        self.failureResultOf(self.call(), UnknownRun)
        self.assertEqual(self.pool.calls, [])

    def test_one_call_too_many_stops_the_run(self) -> None:
        self.successResultOf(self.call())
        self.successResultOf(self.call())
        refused = self.failureResultOf(self.call(), RunRefusedCall)
        self.assertEqual(refused.value.code, "too_many_calls")
        failed = self.failureResultOf(self.ran.outcome, RunFailed)
        self.assertEqual(failed.value.code, "too_many_calls")
