"""
L{mcpx.scripts.runner}: programs run in a real sandboxed worker process, their tool
calls made through a pool (a fake one here, so what reaches it can be checked).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorProcess
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from mcpx.call import Call
from mcpx.pool.errors import UnknownServer
from mcpx.pool.interface import PoolInterface
from mcpx.scripts.artifacts import Artifacts, UnknownArtifact
from mcpx.scripts.outcome import RunFailed, RunOutcome, TooManyRuns
from mcpx.scripts.run import Limits
from mcpx.scripts.runner import Scripts
from mcpx.wire.errors import RpcError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for every purpose but its entry.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class FakePool:
    """Two servers, demo and math; records every call with its caller."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any], object, float | None]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.hold: Deferred[None] | None = None
        self.cancelled = 0

    def status(self) -> list[Any]:
        # The runner reads the names only.
        return [SimpleNamespace(name=name) for name in ("demo", "math")]

    async def tools(self, server: str, *, client: str = "") -> list[dict[str, Any]]:
        return [
            {
                "name": "add",
                "description": "Add two numbers.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            }
        ]

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        client: str = "",
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
        on_progress: Any = None,
        call: Call | None = None,
    ) -> dict[str, Any]:
        self.calls.append((server, tool, dict(arguments), call, timeout))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.hold is not None:
                try:
                    await self.hold
                except CancelledError:
                    self.cancelled += 1
                    raise
            else:
                # Answer on a later turn, so calls made together are in flight together.
                await deferLater(reactor, 0.01, lambda: None)
        finally:
            self.in_flight -= 1
        if server == "nowhere":
            raise UnknownServer(server, ["demo"])
        if tool == "fail":
            return {"content": [{"type": "text", "text": "demo refuses"}], "isError": True}
        if tool == "rpc":
            raise RpcError(-32602, "no tool named 'rpc'")
        if tool == "add":
            total = arguments["a"] + arguments["b"]
            text = [{"type": "text", "text": str(total)}]
            return {"content": text, "structuredContent": {"sum": total}}
        return {"content": [{"type": "text", "text": f"{server}:{tool}"}]}


class RunnerTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.pool = FakePool()
        self.root = Path(self.mktemp())
        self.artifacts = Artifacts(self.root, reactor, retention=60.0)
        self.artifacts.start()
        self.addCleanup(self.artifacts.close)
        self.scripts = Scripts(
            reactor,
            reactor,
            lambda: cast(PoolInterface, self.pool),
            Limits(timeout=20.0, output=4096),
            self.artifacts,
        )
        self.pids: list[int] = []
        original = self.scripts.reactor.spawnProcess

        def spawning(*args: Any, **kwargs: Any) -> Any:
            transport = original(*args, **kwargs)
            self.pids.append(transport.pid)
            return transport

        self.scripts.reactor = cast(IReactorProcess, _Spawner(spawning))

    def start(self, program: str, **kwargs: Any) -> Deferred[RunOutcome]:
        kwargs.setdefault("identity", "alice")
        return Deferred.fromCoroutine(self.scripts.execute(program, **kwargs))

    async def failure_of(self, program: str, **kwargs: Any) -> RunFailed:
        try:
            await self.start(program, **kwargs)
        except RunFailed as e:
            return e
        self.fail("the program finished")

    def assertNoProcessLeft(self) -> None:
        self.assertTrue(self.pids)
        self.assertEqual([pid for pid in self.pids if _alive(pid)], [])
        self.assertEqual(self.scripts.runs, {})

    async def test_twenty_parallel_calls_across_two_servers(self) -> None:
        """
        Twenty calls made with asyncio.gather across two servers are in flight together,
        each carries the run's caller, and the program returns one line.
        """
        caller = Call("mcp-7", {"elicitation": {}})
        outcome = await self.start(
            "import asyncio\n"
            "rs = await asyncio.gather(*[(demo if i % 2 else math).add(a=i, b=1) "
            "for i in range(20)])\n"
            "f\"total={sum(r['sum'] for r in rs)}\"",
            call=caller,
        )
        self.assertEqual(outcome.value, "total=210")
        self.assertEqual(len(self.pool.calls), 20)
        self.assertEqual({c[0] for c in self.pool.calls}, {"demo", "math"})
        self.assertTrue(all(c[3] is caller for c in self.pool.calls))
        self.assertGreater(self.pool.most_in_flight, 1)
        self.assertNoProcessLeft()

    async def test_run_without_caller_gets_its_own(self) -> None:
        """A run whose request has no caller gets one named after the run."""
        outcome = await self.start("await demo.echo()")
        caller = self.pool.calls[0][3]
        assert isinstance(caller, Call)
        self.assertEqual(caller.id, outcome.run)
        self.assertEqual(outcome.value, "demo:echo")

    async def test_calls_bounded_by_what_is_left_of_the_run(self) -> None:
        """Each call's timeout is the tighter of pool.callTimeout and the run's time left."""
        await self.start("await demo.echo()", timeout=5.0)
        bound = self.pool.calls[0][4]
        assert bound is not None
        self.assertLessEqual(bound, 5.0)
        self.assertGreater(bound, 3.0)

    async def test_tool_errors_raise_with_the_upstream_message(self) -> None:
        outcome = await self.start(
            "out = []\n"
            "for name in ['fail', 'rpc']:\n"
            "    try:\n"
            "        await call('demo', name, {})\n"
            "    except RuntimeError as e:\n"
            "        out.append(str(e))\n"
            "out"
        )
        self.assertEqual(
            outcome.value,
            [
                "demo.fail: demo refuses",
                "server 'demo' answered with JSON-RPC error -32602: no tool named 'rpc'",
            ],
        )

    async def test_pool_refusals_are_worded_by_explain(self) -> None:
        """
        A call the pool refuses raises in the program with the error's own message, or
        with the wording the daemon gives the runner.
        """
        program = (
            "try:\n"
            "    await call('nowhere', 'echo', {})\n"
            "except RuntimeError as e:\n"
            "    out = str(e)\n"
            "out"
        )
        plain = await self.start(program)
        self.assertEqual(
            plain.value, "no server named 'nowhere' is configured (configured servers: demo)"
        )
        self.scripts.explain = lambda error: f"{error.message}; see the daemon"
        worded = await self.start(program)
        self.assertEqual(worded.value, f"{plain.value}; see the daemon")

    async def test_stubs(self) -> None:
        outcome = await self.start('await stubs("demo")')
        self.assertIn("async def add(*, a: int, b: int) -> Any:", outcome.value)
        self.assertIn("Add two numbers.", outcome.value)

    async def test_print_and_result(self) -> None:
        outcome = await self.start('print("hello")\n{"a": [1, 2]}')
        self.assertEqual(outcome.output, "hello\n")
        self.assertEqual(outcome.value, {"a": [1, 2]})

    async def test_unawaited_call_is_explained(self) -> None:
        error = await self.failure_of("demo.add(a=1, b=2)")
        self.assertIn("await demo.tool(...)", error.message)

    async def test_timeout_stops_the_program(self) -> None:
        """At the run's bound the program is stopped: a clear error, what it printed, no process."""
        error = await self.failure_of('print("started")\nwhile True:\n    pass', timeout=1.5)
        self.assertEqual(error.code, "timeout")
        self.assertIn("stopped after 1.5s", error.message)
        self.assertEqual(error.output, "started\n")
        self.assertIn("started", str(error))
        self.assertNoProcessLeft()

    async def test_timeout_cancels_calls_in_flight(self) -> None:
        """A run that ends while its calls wait takes them with it (membership ends)."""
        self.pool.hold = Deferred()
        error = await self.failure_of("await demo.slow()", timeout=1.0)
        self.assertEqual(error.code, "timeout")
        self.assertEqual(self.pool.cancelled, 1)
        self.assertEqual(self.pool.in_flight, 0)
        self.assertNoProcessLeft()

    async def test_cancellation(self) -> None:
        """Cancelling the run (the host cancelled its call) stops the program and its calls."""
        self.pool.hold = Deferred()
        running = self.start('print("waiting")\nawait demo.slow()')
        await deferLater(reactor, 1.0, lambda: None)
        running.cancel()
        with self.assertRaises(CancelledError):
            await running
        self.assertEqual(self.pool.cancelled, 1)
        self.assertNoProcessLeft()

    async def test_crashing_worker(self) -> None:
        """A worker process that dies mid-run is a clear error, not a hang."""
        self.pool.hold = Deferred()
        running = self.start("await demo.slow()")
        for _ in range(100):
            if self.pool.calls:
                break
            await deferLater(reactor, 0.05, lambda: None)
        os.kill(self.pids[0], 9)
        try:
            await running
        except RunFailed as e:
            self.assertEqual(e.code, "program_crashed")
        else:
            self.fail("no error")
        self.assertNoProcessLeft()

    async def test_runtime_error(self) -> None:
        error = await self.failure_of('print("before")\n1 / 0')
        self.assertEqual(error.code, "program_failed")
        self.assertIn("ZeroDivisionError", error.message)
        self.assertEqual(error.output, "before\n")
        self.assertNoProcessLeft()

    async def test_syntax_error(self) -> None:
        error = await self.failure_of("def (:")
        self.assertEqual(error.code, "program_syntax")

    async def test_output_flood(self) -> None:
        """A program printing without end is stopped at exec.maxOutput."""
        error = await self.failure_of('while True:\n    print("x" * 100)')
        self.assertEqual(error.code, "output_too_large")
        self.assertIn("exec.maxOutput", error.message)
        self.assertLessEqual(len(error.output), 4096)
        self.assertNoProcessLeft()

    async def test_too_many_calls(self) -> None:
        self.scripts.limits = Limits(calls=3)
        error = await self.failure_of("for i in range(5):\n    await demo.echo()")
        self.assertEqual(error.code, "too_many_calls")
        self.assertEqual(len(self.pool.calls), 3)

    async def test_memory_limit(self) -> None:
        self.scripts.limits = Limits(memory=8 * 1024 * 1024)
        error = await self.failure_of("x = [0] * 10**8\nlen(x)")
        self.assertIn("MemoryError", error.message)

    async def test_too_many_runs(self) -> None:
        self.scripts.limits = Limits(runs=1)
        self.pool.hold = Deferred()
        first = self.start("await demo.slow()")
        with self.assertRaises(TooManyRuns):
            await self.start("1")
        first.cancel()
        with self.assertRaises(CancelledError):
            await first

    async def test_cannot_read_a_file(self) -> None:
        error = await self.failure_of('open("/etc/passwd").read()')
        self.assertIn("PermissionError", error.message)

    async def test_cannot_list_a_directory(self) -> None:
        error = await self.failure_of('import os\nos.listdir("/")')
        self.assertIn("PermissionError", error.message)

    async def test_cannot_escape_out(self) -> None:
        error = await self.failure_of('open("/out/../../etc/passwd").read()')
        self.assertIn("PermissionError", error.message)

    async def test_cannot_open_a_socket(self) -> None:
        error = await self.failure_of("import socket\nsocket.socket()")
        self.assertIn("ModuleNotFoundError", error.message)

    async def test_cannot_start_a_process(self) -> None:
        for program in ("import subprocess", 'import os\nos.system("id")', "import os\nos.fork()"):
            error = await self.failure_of(program)
            self.assertEqual(error.code, "program_failed", program)

    async def test_cannot_read_the_environment_of_the_daemon(self) -> None:
        """The worker is started with a bare environment: the daemon's secrets stay out."""
        os.environ["MCPX_TEST_SECRET"] = "hunter2"
        self.addCleanup(os.environ.pop, "MCPX_TEST_SECRET")
        try:
            outcome = await self.start('import os\nos.getenv("MCPX_TEST_SECRET")')
        except RunFailed as e:
            self.assertNotIn("hunter2", str(e))
        else:
            self.assertNotEqual(outcome.value, "hunter2")

    async def test_files_written_to_out_are_artifacts_of_their_identity(self) -> None:
        """A file under /out is an artifact its identity lists and reads; nobody else can."""
        outcome = await self.start(
            'open("/out/report.csv", "w").write("a,b\\n1,2\\n")\n"ok"', identity="alice"
        )
        [artifact] = outcome.artifacts
        self.assertEqual(artifact["uri"], f"mcpx://artifacts/{outcome.run}/report.csv")
        self.assertEqual(artifact["mimeType"], "text/csv")
        self.assertEqual(artifact["size"], 8)
        self.assertEqual([a["uri"] for a in self.artifacts.listed("alice")], [artifact["uri"]])
        self.assertEqual(self.artifacts.listed("bob"), [])
        read = self.artifacts.read("alice", artifact["uri"], 1 << 20)
        self.assertEqual(read["text"], "a,b\n1,2\n")
        with self.assertRaises(UnknownArtifact):
            self.artifacts.read("bob", artifact["uri"], 1 << 20)

    async def test_large_answer_becomes_an_artifact(self) -> None:
        self.scripts.limits = Limits(inline=1000)
        outcome = await self.start('"y" * 5000')
        self.assertFalse(outcome.has_value)
        self.assertIn("exec.inlineMax", outcome.output)
        [artifact] = outcome.artifacts
        self.assertEqual(artifact["size"], 5003)  # the JSON string and its newline

    async def test_artifacts_expire(self) -> None:
        """A run's files go after exec.artifactRetention."""
        self.artifacts.retention = 0.5
        outcome = await self.start('open("/out/a.txt", "w").write("x")\n1')
        self.assertEqual(len(self.artifacts.listed("alice")), 1)
        await deferLater(reactor, 1.0, lambda: None)
        self.assertEqual(self.artifacts.listed("alice"), [])
        self.assertFalse((self.root / outcome.run).exists())


class _Spawner:
    def __init__(self, spawn: Any) -> None:
        self.spawnProcess = spawn
