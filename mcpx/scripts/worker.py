# -*- test-case-name: tests.scripts.test_runner -*-
"""
The process one C{mcpx_exec} program runs in: C{python -m mcpx.scripts.worker}.

It runs the program in Monty (C{pydantic_monty}), a Python-subset interpreter written
in Rust whose only ways out are the ones this module hands it, and speaks to the daemon
over its stdin and stdout with the lines of L{mcpx.scripts.protocol}.  The daemon never
runs the interpreter itself: a program that loops, allocates or crashes the
interpreter takes this process with it, not the daemon, and the daemon ends it (and
its process group) whenever the run is over.

What the program sees:

 - each configured server as a name (C{demo}), each of its tools as an C{async}
   method (C{await demo.add(a=2, b=40)}), answered by the daemon through the pool;
 - C{await call(server, tool, arguments)} for names that are not identifiers;
 - C{await stubs(server)}, the server's tools as Python stubs, and C{SERVERS};
 - the files under C{/out}, the run's artifacts directory (when the daemon gave one).

Anything else the interpreter would ask the host for (a file outside C{/out}, the
clock is fine, a module Monty does not bundle) is refused.

Never imports Twisted: it starts in a fraction of the daemon's time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from mcpx.scripts import protocol


def _detach() -> None:
    """
    Own process group, so the daemon ends this process and the interpreter it starts
    in one signal; and die with the daemon (Linux), so no run outlives it.
    """
    with contextlib.suppress(OSError):
        os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)


class Channel:
    """The daemon at the other end of stdin and stdout: one JSON object a line."""

    def __init__(self, incoming: IO[bytes], outgoing: IO[bytes]) -> None:
        self._in = incoming
        self._out = outgoing

    def send(self, message: Mapping[str, Any]) -> None:
        self._out.write(protocol.encode(message))
        self._out.flush()

    def receive(self) -> dict[str, Any]:
        line = self._in.readline()
        if not line:
            # The daemon went: nothing is waiting for this program any more.
            os._exit(3)
        decoded: dict[str, Any] = json.loads(line)
        return decoded


class Namespace:
    """One server, as the program sees it: its tools as methods (routed by the worker)."""

    def __init__(self, server: str) -> None:
        self.server = server


def _result_value(result: Any) -> Any:
    """The program's final value as JSON, or its text when it is not JSON."""
    # Monty hands an unawaited host call back as this text.
    if isinstance(result, str) and result.startswith("<coroutine external_future("):
        raise protocol.ProgramError(
            "the program returned a tool call it did not await: every tool is async, "
            "write `await demo.tool(...)`"
        )
    try:
        json.dumps(result)
    except (TypeError, ValueError):
        return {"repr": repr(result)}
    return {"json": result}


def run(start: Mapping[str, Any], channel: Channel) -> None:
    """Run the program of one start message to its end, telling the daemon as it goes."""
    import pydantic_monty as monty

    limits = start.get("limits", {})
    servers: list[str] = list(start.get("servers", ()))
    namespaces: dict[str, monty.ClassInstance] = {}
    by_id: dict[Any, str] = {}

    class AnyTool(monty.ClassInstance):
        """A server: any public name is a tool call, which its server may not know."""

        def method_allowed(self, name: str) -> bool:
            return not name.startswith("_")

    for name in servers:
        if not name.isidentifier():
            continue
        holder = AnyTool(Namespace(name))
        namespaces[name] = holder
        by_id[holder.id] = name
    # The Rust interpreter is checked out of a pool of one worker process, which it
    # starts; the worker and everything it forks share this process's group.
    pool = monty.Monty(min_processes=1, max_processes=1)
    pending: dict[int, str] = {}
    calls = 0
    # One more than the daemon allows: the daemon, which counts too, says no first.
    max_calls = int(limits.get("calls", 1000)) + 1
    out = start.get("out")
    mount = None
    if out:
        mount = monty.MountDir(
            host_path=Path(out),
            virtual_path="/out",
            mode="read-write",
            write_bytes_limit=int(limits.get("artifactBytes", 64 * 1024 * 1024)),
        )

    def printed(stream: str, text: str) -> None:
        channel.send({"print": text})

    resource_limits: monty.ResourceLimits = {
        "max_memory": int(limits.get("memory", 256 * 1024 * 1024)),
        # Calls, name lookups and future waits all count; leave room for the waits.
        "max_suspensions": max_calls * 3 + 16,
    }
    if limits.get("cpu"):
        resource_limits["max_feed_duration_secs"] = float(limits["cpu"])
    with pool, pool.checkout(limits=resource_limits, script_name="program.py") as session:
        try:
            snapshot: Any = session.feed_start(
                start["program"],
                inputs={"SERVERS": sorted(servers), **dict(start.get("inputs") or {})},
                print_callback=printed,
                mount=mount,
            )
            while not isinstance(snapshot, monty.MontyComplete):
                if isinstance(snapshot, monty.NameLookupSnapshot):
                    found = namespaces.get(snapshot.variable_name)
                    if found is not None and snapshot.object_id is None:
                        snapshot = snapshot.resume(value=found)
                    else:
                        snapshot = snapshot.resume()
                elif isinstance(snapshot, monty.FunctionSnapshot):
                    if snapshot.is_os_function:
                        # Mounted /out first; everything else is refused by Monty itself.
                        snapshot = snapshot.resume_auto()
                        continue
                    request = _request(snapshot, by_id)
                    if request is None:
                        snapshot = snapshot.resume(
                            {
                                "exc_type": "NameError",
                                "message": f"name {snapshot.function_name!r} is not defined",
                            }
                        )
                        continue
                    calls += 1
                    if calls > max_calls:
                        raise protocol.ProgramError(
                            f"the program made more than {max_calls} calls (exec.maxCalls)"
                        )
                    channel.send({"call": snapshot.call_id, **request})
                    pending[snapshot.call_id] = request.get("tool", request["fn"])
                    snapshot = snapshot.resume({"future": ...})
                elif isinstance(snapshot, monty.FutureSnapshot):
                    wanted = set(snapshot.pending_call_ids)
                    answers: dict[int, Any] = {}
                    while not answers:
                        message = channel.receive()
                        call_id = message.get("result")
                        if call_id in wanted:
                            pending.pop(call_id, None)
                            answers[call_id] = _answer(message)
                    snapshot = snapshot.resume(answers)
                else:
                    raise protocol.ProgramError(f"the interpreter paused on {snapshot!r}")
            done = _result_value(snapshot.output)
            channel.send({"done": done})
        except protocol.ProgramError as e:
            channel.send({"failed": {"kind": "program", "message": str(e)}})
        except monty.MontySyntaxError as e:
            channel.send({"failed": {"kind": "syntax", "message": e.display()}})
        except monty.MontyRuntimeError as e:
            channel.send({"failed": {"kind": "runtime", "message": e.display()}})
        except monty.MontyCrashedError as e:
            channel.send(
                {"failed": {"kind": "crashed", "message": f"the interpreter crashed: {e}"}}
            )
        finally:
            if mount is not None:
                mount.close()


def _request(snapshot: Any, by_id: Mapping[Any, str]) -> dict[str, Any] | None:
    """What the daemon is asked for one host call of the program, or C{None} if unknown."""
    if snapshot.object_id is not None:
        server = by_id.get(snapshot.object_id)
        if server is None:
            return None
        if snapshot.args:
            raise protocol.ProgramError(
                f"{server}.{snapshot.function_name}() takes keyword arguments only, "
                "as named in its input schema"
            )
        return {
            "fn": "tool",
            "server": server,
            "tool": snapshot.function_name,
            "arguments": dict(snapshot.kwargs),
        }
    name = snapshot.function_name
    args = list(snapshot.args)
    kwargs = dict(snapshot.kwargs)
    if name == "call":
        server = kwargs.pop("server", args.pop(0) if args else None)
        tool = kwargs.pop("tool", args.pop(0) if args else None)
        arguments = kwargs.pop("arguments", args.pop(0) if args else {})
        if not isinstance(server, str) or not isinstance(tool, str):
            raise protocol.ProgramError("call(server, tool, arguments): server and tool are names")
        return {"fn": "tool", "server": server, "tool": tool, "arguments": dict(arguments or {})}
    if name == "stubs":
        server = kwargs.pop("server", args.pop(0) if args else None)
        if not isinstance(server, str):
            raise protocol.ProgramError("stubs(server): name the server, one of SERVERS")
        return {"fn": "stubs", "server": server}
    return None


def _answer(message: Mapping[str, Any]) -> dict[str, Any]:
    if "error" in message:
        return {"exc_type": "RuntimeError", "message": str(message["error"])}
    return {"return_value": message.get("value")}


def main() -> None:
    _detach()
    channel = Channel(sys.stdin.buffer, sys.stdout.buffer)
    start = channel.receive()
    try:
        run(start["start"], channel)
    except Exception as e:  # pragma: no cover - reported, then the daemon ends the run
        channel.send({"failed": {"kind": "worker", "message": f"{type(e).__name__}: {e}"}})


if __name__ == "__main__":
    main()
