# -*- test-case-name: tests.scripts.test_runner -*-
"""
Runs C{mcpx_exec} programs: one worker process each (L{mcpx.scripts.worker}), driven
from the reactor over its pipes (L{mcpx.scripts.run}), every tool call it asks for made
through the pool.

Run membership.  A run has one L{Call}, chosen before the program starts: the host
request's own when it has one (so a question can reach the client that called
C{mcpx_exec}), else one named after the run.  Every upstream call the program makes
carries that same caller, so the pool's attribution rule (L{mcpx.pool.pool.Pool.owner})
sees one owner however many of the run's calls are in flight on an instance, and a
question there is the run's; a run and anybody else on one instance is ambiguous and
goes to the broker.  When the run ends its calls still in flight are cancelled, which
takes the caller off every instance.

Bounds (L{mcpx.pool.budget}).  C{exec.timeout} (or the shorter C{timeoutSec} of the
call) bounds the whole run; each call is bounded by C{pool.callTimeout} and by what is
left of the run, the tighter firing; the pool pauses a call's own clock while a
question is out, the run's clock keeps going.  Output, calls, memory and artifact
bytes have limits of their own (C{exec.*}).  However a run ends, its process group is
killed and waited for before the caller is answered.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from attrs import define, field
from twisted.application.service import Service
from twisted.internet.defer import CancelledError, Deferred, gatherResults
from twisted.internet.interfaces import (
    IReactorProcess,
    IReactorTime,
)
from twisted.logger import Logger

from mcpx.call import Call
from mcpx.pool.budget import call_timeout_in_run
from mcpx.pool.errors import PoolError
from mcpx.pool.interface import PoolInterface
from mcpx.scripts import cpython
from mcpx.scripts.artifacts import RESULT_NAME, Artifacts, artifact_uri
from mcpx.scripts.outcome import (
    RunFailed,
    RunOutcome,
    RunRefusedCall,
    TooManyRuns,
    UnknownRun,
)
from mcpx.scripts.run import CPythonChild, Limits, Run, Worker
from mcpx.scripts.stubs import server_stubs
from mcpx.settings.resolve import Settings
from mcpx.wire.errors import RpcError

_log = Logger()


def pool_error_text(error: PoolError) -> str:
    """A pool's refusal as a run's program reads it: the error's own message."""
    return error.message


#: How much of an answer too large to inline is shown in its place.
PREVIEW_CHARS: Final = 2000

#: Where the worker's code is found: the directory holding the C{mcpx} package.
_PACKAGE_ROOT: Final = str(Path(__file__).resolve().parents[2])

_BOOT: Final = (
    "import sys; sys.path.insert(0, sys.argv[1]); from mcpx.scripts.worker import main; main()"
)


def tool_value(result: Mapping[str, Any]) -> Any:
    """
    A C{CallToolResult} as the program sees it: its structured content if any, else its
    text, else its content blocks.

    @raise ToolFailed: for an C{isError} result, with the tool's own message.
    """
    content = result.get("content")
    blocks = content if isinstance(content, list) else []
    texts = [b.get("text") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    text = "\n".join(t for t in texts if isinstance(t, str))
    if result.get("isError"):
        raise ToolFailed(text or "the tool reported an error without a message")
    if "structuredContent" in result:
        return result["structuredContent"]
    if len(texts) == len(blocks):
        return text
    return blocks


class ToolFailed(Exception):
    """A tool's result said it failed (C{isError})."""


@define(eq=False)
class Scripts:
    """
    The runs of this daemon.

    @ivar pool: how the runs' calls reach the servers (read at each run: reloads keep it).
    @ivar artifacts: where runs write their files, or C{None} to give them none.
    """

    reactor: IReactorProcess
    clock: IReactorTime
    pool: Callable[[], PoolInterface | None]
    limits: Limits
    artifacts: Artifacts | None = None
    python: str = sys.executable
    max_line: int = 64 * 1024 * 1024
    runs: dict[str, Run] = field(factory=dict)
    socket: str | None = None
    scratch: Path | None = None
    #: Words a pool's refusal for the program (the daemon adds where to look next).
    explain: Callable[[PoolError], str] = pool_error_text

    @staticmethod
    def new_run_id() -> str:
        """A fresh run id: random, so one caller cannot guess another's."""
        return "run-" + secrets.token_hex(6)

    def check_room(self) -> None:
        """
        @raise TooManyRuns: when C{exec.maxRuns} programs are running already.
        """
        if len(self.runs) >= self.limits.runs:
            raise TooManyRuns(self.limits.runs)

    async def execute(
        self,
        program: str,
        *,
        identity: str,
        owner: str | None = None,
        call: Call | None = None,
        timeout: float | None = None,
        inputs: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> RunOutcome:
        """
        Run C{program} to its end.

        @param identity: the client its tool calls are made as.
        @param owner: who may list and read its artifacts, when not C{identity}.
        @param call: the host request's call, so the program's questions reach its
            client; a run without one gets its own, named after the run.
        @param timeout: a bound shorter than C{exec.timeout}; a longer one is clamped.
        @param run_id: the run's id, when the caller had to know it first (L{new_run_id}).
        @raise RunFailed: when it did not finish; L{TooManyRuns} when it cannot start.
        """
        limits = self.limits
        self.check_room()
        pool = self.pool()
        if pool is None:
            raise RunFailed("pool_unavailable", "the daemon runs without its server pool")
        bound = limits.timeout if timeout is None else min(limits.timeout, timeout)
        run_id = run_id or self.new_run_id()
        if call is None:
            call = Call(run_id, {})
        now = self.clock.seconds()
        run = Run(run_id, identity, call, self, limits, now, now + bound)
        # Registered before the program starts: its first call already belongs to it.
        self.runs[run_id] = run
        out = None
        if self.artifacts is not None:
            out = str(self.artifacts.directory_for(run_id, owner or identity))
        try:
            if limits.mode == "cpython":
                self._start_cpython(run, program, out, inputs or {}, bound)
            else:
                self._start_monty(run, program, out, inputs or {}, bound)
        except OSError as e:
            self.runs.pop(run_id, None)
            self._forget(run)
            raise RunFailed("worker_failed", f"the sandbox could not be started: {e}") from None
        run.timer = self.clock.callLater(
            bound,
            run.stop,
            "timeout",
            f"the program was stopped after {bound:g}s (exec.timeout, or timeoutSec)",
        )
        try:
            return await run.outcome
        except CancelledError:
            # The caller went (the host cancelled its call): the program goes too, and
            # its process is waited for before the cancellation goes on.
            run.stop("cancelled", "the run was cancelled")
            if run.worker is not None and not run.worker.gone:
                await run.worker.ended
            raise

    def _start_monty(
        self, run: Run, program: str, out: str | None, inputs: Mapping[str, Any], bound: float
    ) -> None:
        pool = self.pool()
        worker = Worker(run, self.max_line)
        run.worker = worker
        run.transport = self.reactor.spawnProcess(
            worker,
            self.python,
            [self.python, "-I", "-c", _BOOT, _PACKAGE_ROOT],
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
        )
        limits = run.limits
        start = {
            "program": program,
            "inputs": dict(inputs),
            "servers": [status.name for status in pool.status()] if pool is not None else [],
            "limits": {
                "memory": limits.memory,
                "calls": limits.calls,
                "cpu": bound,
                "artifactBytes": limits.artifact_bytes,
            },
            "out": out,
        }
        run.send({"start": start})

    def _start_cpython(
        self, run: Run, program: str, out: str | None, inputs: Mapping[str, Any], bound: float
    ) -> None:
        if self.socket is None or self.scratch is None:
            raise OSError("exec.mode cpython needs the daemon's unix socket and state directory")
        pool = self.pool()
        run.key = secrets.token_hex(16)
        run.run_dir = self.scratch / run.id
        if out is None:
            out = str(run.run_dir / "out")
        main, source = cpython.prepare(
            run.run_dir,
            program,
            cpython.RunClient(
                socket=self.socket,
                run=run.id,
                key=run.key,
                servers=tuple(status.name for status in pool.status()) if pool is not None else (),
                out=out,
                inputs=inputs,
            ),
        )
        Path(out).mkdir(parents=True, exist_ok=True, mode=0o700)
        limits = run.limits
        conf = {
            "python": self.python,
            "main": main,
            "program": source,
            "runDir": str(run.run_dir),
            "out": out,
            "memory": limits.memory,
            "cpu": int(bound) + 1,
            "fileBytes": limits.artifact_bytes,
        }
        worker = CPythonChild(run, self.max_line)
        run.worker = worker
        run.transport = self.reactor.spawnProcess(
            worker,
            self.python,
            cpython.launch_argv(self.python, conf),
            env=cpython.child_environment(),
            childFDs={0: "w", 1: "r", 2: "r", 3: "r"},
        )

    def _forget(self, run: Run) -> None:
        if self.artifacts is not None:
            self.artifacts.ended(run.id)
        if run.run_dir is not None:
            cpython.remove(run.run_dir)

    async def call_in_run(
        self,
        run_id: str,
        key: str,
        *,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """
        A tool call a CPython-mode program made over the daemon's socket: made as its
        run's (its call, its identity), counted and bounded by the run.

        @raise UnknownRun: when C{run_id} is not running or C{key} is not its key.
        @raise RunRefusedCall: when the run's calls or time are used up.
        """
        run = self.runs.get(run_id)
        if run is None or run.finished or not run.key or not hmac.compare_digest(run.key, key):
            raise UnknownRun(run_id)
        pool = self.pool()
        if pool is None:
            raise RunRefusedCall("pool_unavailable", "the daemon runs without its server pool")
        run.calls += 1
        if run.calls > run.limits.calls:
            message = f"the program made more than {run.limits.calls} calls (exec.maxCalls)"
            run.stop("too_many_calls", message)
            raise RunRefusedCall("too_many_calls", message)
        left = run.deadline_at - self.clock.seconds()
        bound = call_timeout_in_run(run.limits.call_timeout, timeout, left)
        if bound <= 0:
            raise RunRefusedCall(
                "timeout", "the run has no time left for another call (exec.timeout)"
            )
        work: Deferred[dict[str, Any]] = Deferred.fromCoroutine(
            pool.call_tool(
                server, tool, arguments, client=run.identity, timeout=bound, call=run.call
            )
        )
        token = object()
        # Ending the run cancels it with the rest: its membership goes everywhere.
        run.in_flight[token] = work
        try:
            return await work
        finally:
            run.in_flight.pop(token, None)

    def ended(self, run: Run) -> None:
        self.runs.pop(run.id, None)
        self._forget(run)

    def inlined(self, outcome: RunOutcome) -> RunOutcome:
        """
        C{outcome} as the caller gets it: with the run's files listed and, when the
        answer is over C{exec.inlineMax}, that answer kept as an artifact and a preview
        in its place.
        """
        store = self.artifacts
        if store is None:
            return outcome
        value = json.dumps(outcome.value, ensure_ascii=False) if outcome.has_value else ""
        size = len(outcome.output.encode()) + len(value.encode())
        if size > self.limits.inline:
            whole = outcome.output + (value + "\n" if value else "")
            store.keep(outcome.run, RESULT_NAME, whole.encode())
            preview = whole[: min(self.limits.inline, PREVIEW_CHARS)]
            note = (
                f"\n… the answer was {size} bytes, over exec.inlineMax "
                f"({self.limits.inline}); all of it is {artifact_uri(outcome.run, RESULT_NAME)}"
            )
            outcome = RunOutcome(outcome.run, preview + note, False, None, None, [])
        return RunOutcome(
            outcome.run,
            outcome.output,
            outcome.has_value,
            outcome.value,
            outcome.shown,
            store.of_run(outcome.run),
        )

    def stop_all(self) -> Deferred[None]:
        """The daemon is stopping: end every run; fires once their processes are gone."""
        ends = []
        for run in list(self.runs.values()):
            run.stop("daemon_stopping", "the daemon is stopping")
            if run.worker is not None:
                ends.append(run.worker.ended)
        return gatherResults(ends).addCallback(lambda _: None)

    async def answer(self, run: Run, message: Mapping[str, Any]) -> dict[str, Any]:
        """One call the program made, as the result line the worker is sent."""
        pool = self.pool()
        if pool is None:
            return {"error": "the daemon runs without its server pool"}
        server = message.get("server")
        if not isinstance(server, str):
            return {"error": "a call names a server"}
        try:
            if message.get("fn") == "stubs":
                tools = await pool.tools(server, client=run.identity)
                return {"value": server_stubs(server, tools)}
            tool = message.get("tool")
            arguments = message.get("arguments")
            if not isinstance(tool, str) or not isinstance(arguments, dict):
                return {"error": "a tool call names a tool and passes keyword arguments"}
            left = run.deadline_at - self.clock.seconds()
            bound = call_timeout_in_run(self.limits.call_timeout, None, left)
            if bound <= 0:
                return {"error": "the run has no time left for another call (exec.timeout)"}
            result = await pool.call_tool(
                server,
                tool,
                arguments,
                client=run.identity,
                timeout=bound,
                call=run.call,
            )
            return {"value": tool_value(result)}
        except CancelledError:
            raise
        except ToolFailed as e:
            return {"error": f"{server}.{message.get('tool')}: {e}"}
        except RpcError as e:
            return {
                "error": f"server {server!r} answered with JSON-RPC error {e.code}: {e.message}"
            }
        except PoolError as e:
            return {"error": self.explain(e)}


def limits_from(settings: Settings) -> Limits:
    """The C{exec.*} settings (and C{pool.callTimeout}) as a run's L{Limits}."""
    return Limits(
        timeout=settings.duration("exec.timeout"),
        call_timeout=settings.duration("pool.callTimeout"),
        memory=settings.integer("exec.maxMemory"),
        output=settings.integer("exec.maxOutput"),
        calls=settings.integer("exec.maxCalls"),
        artifact_bytes=settings.integer("exec.maxArtifactBytes"),
        runs=settings.integer("exec.maxRuns"),
        inline=settings.integer("exec.inlineMax"),
        mode=settings.string("exec.mode"),
    )


class ScriptsService(Service):
    """Clears old artifacts when the daemon starts; ends every run when it stops."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts

    def startService(self) -> None:
        Service.startService(self)
        if self.scripts.artifacts is not None:
            self.scripts.artifacts.start()
        if self.scripts.scratch is not None:
            cpython.clear(self.scripts.scratch)

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        ending = self.scripts.stop_all()

        def cleared(_: object) -> None:
            if self.scripts.artifacts is not None:
                self.scripts.artifacts.close()

        return ending.addCallback(cleared)
