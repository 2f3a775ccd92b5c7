"""
The question relay under concurrency: real daemons, a hand-written 2025-11-25 upstream
that asks on its connection (C{tests/fixtures/asking_upstream.py}, in a mode that stops
when cancelled and one that ignores cancellation), and hosts driven message by message
(L{tests.questions.hosts}) on the MCP socket C{mcpx serve} bridges to and on C{/mcp}
sessions, so that each test decides when a caller gives up.

Every test counts what a user would notice: a host shown another host's question (a
misroute, never allowed), questions withdrawn from the host that was asked, cancels the
upstream received, and questions answered natively by their own host.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, Final

import anyio
import mcp_types as types
import treq
from mcp import Client
from mcp.client.context import ClientRequestContext
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.internet.threads import blockingCallFromThread, deferToThread
from twisted.trial.unittest import TestCase
from twisted.web.http_headers import Headers

from mcpx.spec.feature import TASKS_EXTENSION
from mcpx.wire.errors import MISSING_REQUIRED_CLIENT_CAPABILITY
from tests.questions.hosts import HttpSessionHost, ModernHost, SocketHost, _Host
from tests.questions.support import Daemon, in_thread
from tests.support.processes import REPO, reactor

FIXTURE = REPO / "tests" / "fixtures" / "asking_upstream.py"


def asking_server(*flags: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(FIXTURE), *flags]}


#: What a roots host declares.
ROOTS_HOST: dict[str, Any] = {"roots": {"listChanged": True}}


def labels_asked(host: _Host) -> list[str]:
    """The labels of the questions a host was shown (each names the call it is for)."""
    found = []
    for request in host.asked:
        message = (request.get("params") or {}).get("message", "")
        found.append(message.rsplit("question for ", 1)[-1])
    return found


def misroutes(hosts: list[_Host], own: Callable[[_Host], set[str]]) -> list[tuple[str, str]]:
    """Every (host, label) where a host was shown a question of a call not its own."""
    return [
        (host.name, label)
        for host in hosts
        for label in labels_asked(host)
        if label not in own(host)
    ]


def result_text(response: dict[str, Any]) -> str:
    result = response.get("result") or {}
    return "\n".join(block.get("text", "") for block in result.get("content", []))


class _DaemonTest(TestCase):
    timeout = 120

    async def daemon(self, *flags: str, **settings: str) -> Daemon:
        env = {"MCPX_POOL_CANCEL_GRACE": "20s"}
        env.update(settings)
        self.daemon_ = await Daemon(
            self, {"ask": asking_server(*flags)}, passthrough=["ask"], settings=env
        ).start()
        return self.daemon_

    def socket_host(self, name: str, **kwargs: Any) -> SocketHost:
        host = SocketHost(str(self.daemon_.state_dir / "mcpx-mcp.sock"), name, **kwargs)
        self.addCleanup(host.close)
        return host

    def http_host(self, name: str, **kwargs: Any) -> HttpSessionHost:
        host = HttpSessionHost(self.daemon_.port, name, **kwargs)
        self.addCleanup(host.close)
        return host

    def host(self, transport: str, name: str, **kwargs: Any) -> _Host:
        if transport == "socket":
            return self.socket_host(name, **kwargs)
        return self.http_host(name, **kwargs)

    async def stats(
        self, capabilities: dict[str, Any] | None = None, *, gateway: bool = False
    ) -> dict[str, Any]:
        """
        What the upstream saw (a call of its own, through a fresh host): the instance a
        pass-through host declaring C{capabilities} reaches (as the hosts' default,
        elicitation, when not given), since mcpx declares upstream no more than its
        host did; or with C{gateway} the one C{mcpx_call} reaches, declaring all.
        """

        def ask() -> dict[str, Any]:
            host = self.socket_host("stats", capabilities=capabilities, passthrough=["ask"])
            if gateway:
                answer = host.response(host.call("mcpx_call", {"server": "ask", "tool": "stats"}))
            else:
                answer = host.response(host.call("stats", {}))
            stats: dict[str, Any] = json.loads(result_text(answer))
            return stats

        stats: dict[str, Any] = await deferToThread(ask)
        return stats

    def until_sent_upstream(self, count: int = 1) -> None:
        """
        From a conversation's thread: wait until C{count} requests are in flight at the
        upstream C{ask}, so that a host giving its call up now gives up a request the
        upstream has (not one mcpx drops before sending it).
        """
        deadline = time.monotonic() + 30

        def listed() -> Deferred[dict[str, Any]]:
            return Deferred.fromCoroutine(self.daemon_.api("/v1/servers"))

        while True:
            body: dict[str, Any] = blockingCallFromThread(reactor, listed)
            servers: list[dict[str, Any]] = body["servers"]
            if any(s["name"] == "ask" and s["in_flight"] >= count for s in servers):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"ask never had {count} requests in flight: {servers}")
            time.sleep(0.05)

    async def questions(self) -> list[dict[str, Any]]:
        listed = await self.daemon_.api("/v1/questions?all=true")
        found: list[dict[str, Any]] = listed["questions"]
        return found

    async def settle_broker(self, until: Callable[[], bool], timeout: float = 30.0) -> int:
        """
        Cancel every question waiting in the broker (as a person at C{mcpx elicit} would)
        until C{until()}; how many were.
        """
        settled: set[str] = set()
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                self.fail(f"still waiting after {timeout}s; settled {len(settled)}")
            for question in await self.questions():
                if (
                    question["state"] == "pending"
                    and question["route"] == "broker"
                    and question["id"] not in settled
                ):
                    settled.add(question["id"])
                    await self._cancel_question(question["id"])
            await deferLater(reactor, 0.05, lambda: None)
        return len(settled)

    async def _cancel_question(self, question_id: str) -> None:
        from tests.support.http import TestClient

        client = TestClient(reactor, unix_socket=self.daemon_.socket)
        try:
            response = await client.http.post(
                f"http://mcpx/v1/questions/{question_id}/answer",
                data=json.dumps({"action": "cancel"}).encode(),
                headers=Headers({"Content-Type": ["application/json"]}),
            )
            await treq.content(response)
        finally:
            await client.close()


class LegacyCancelTests(_DaemonTest):
    """
    A legacy host cancels its call after its question was asked: the upstream hears the
    cancel at once, the question is withdrawn from the host (C{notifications/cancelled}
    for the question's request id), an answer sent after the cancel does not reach the
    upstream, and the next host's question is its own again.
    """

    async def cancel_after_asked(self, transport: str) -> None:
        # One instance for everyone: the upstream orders B's call after A's by what that
        # one process heard.  (Else B's call, made while A's given-up request may still
        # be running upstream, is given an instance of its own, which never hears of A.)
        await self.daemon(MCPX_POOL_MAX_ASKING_INSTANCES="1")

        def conversation() -> dict[str, Any]:
            a = self.host(transport, "A")
            a.answering = False
            call = a.call("ask", {"label": "A", "after": 0})
            a.wait_for(lambda: len(a.asked) == 1)
            [question] = a.asked
            a.cancel(call)
            a.wait_for(lambda: question["id"] in a.withdrawn)
            # Too late: the host answers anyway; nothing of it may reach the upstream.
            a.answer(question, {"action": "accept", "content": {"name": "too late"}})
            b = self.host(transport, "B")
            # B asks once A's call has stopped (the upstream answered it, on the same pipe
            # before B's question), so its call is alone in flight then.
            answer = b.response(b.call("ask", {"label": "B", "until_replied": "A"}))
            return {"a": a, "b": b, "question": question, "b_text": result_text(answer)}

        seen = await deferToThread(conversation)
        a, b = seen["a"], seen["b"]
        self.assertEqual(misroutes([a, b], lambda host: {host.name}), [])
        self.assertEqual(labels_asked(b), ["B"], "B's question is B's own, natively")
        self.assertEqual(seen["b_text"], 'B: accept {"name": "B"}')
        stats = await self.stats()
        self.assertEqual(len(stats["cancels"]), 1, "the upstream heard the cancel")
        self.assertEqual(stats["answers"]["A"], {"action": "cancel"})
        [record] = [q for q in await self.questions() if q["params"]["message"].endswith(" A")]
        self.assertEqual((record["state"], record["answered_by"]), ("cancelled", "withdrawn"))

    async def test_socket(self) -> None:
        """Over the MCP socket (what C{mcpx serve} bridges)."""
        await self.cancel_after_asked("socket")

    async def test_http_session(self) -> None:
        """Over a Streamable HTTP session on C{/mcp}."""
        await self.cancel_after_asked("http")


class UndeclaredCancelTests(_DaemonTest):
    """
    A host that declared nothing it could be asked calls C{mcpx_call} (the fast path,
    with no caller): the upstream's question waits in the broker named after that call,
    and the host giving the call up withdraws it and cancels the call upstream.
    """

    async def give_up_after_asked(self, transport: str, how: str) -> None:
        env = {"MCPX_POOL_CANCEL_GRACE": "20s"}
        self.daemon_ = await Daemon(self, {"ask": asking_server()}, settings=env).start()
        a = self.host(transport, "A", capabilities={})
        arguments = {"label": "A", "after": 0}
        call = await deferToThread(
            a.call, "mcpx_call", {"server": "ask", "tool": "ask", "arguments": arguments}
        )
        asked = await self.daemon_.wait_for_question("ask")
        self.assertEqual(asked["route"], "broker")
        self.assertTrue(str(asked["call_id"]).startswith("request-"), asked["call_id"])
        if how == "cancel":
            await deferToThread(a.cancel, call)
        else:
            await deferToThread(a.close)
        withdrawn = await self.daemon_.wait_for_question("ask", state="cancelled")
        self.assertEqual(withdrawn["id"], asked["id"])
        self.assertEqual(withdrawn["answered_by"], "withdrawn")
        # The instance mcpx_call reached, which declares every question.
        stats = await self.stats(gateway=True)
        for _ in range(100):
            if "A" in stats["answers"]:
                break
            # The upstream records the answer on its own thread, maybe after the stats.
            await deferLater(reactor, 0.05, lambda: None)
            stats = await self.stats(gateway=True)
        self.assertEqual(len(stats["cancels"]), 1, "the upstream heard the cancel")
        self.assertEqual(stats["answers"].get("A"), {"action": "cancel"})

    async def test_socket_cancel(self) -> None:
        """C{notifications/cancelled} over the MCP socket (what C{mcpx serve} bridges)."""
        await self.give_up_after_asked("socket", "cancel")

    async def test_socket_closed(self) -> None:
        """The host's MCP socket connection closes."""
        await self.give_up_after_asked("socket", "close")

    async def test_http_cancel(self) -> None:
        """C{notifications/cancelled} on a Streamable HTTP session on C{/mcp}."""
        await self.give_up_after_asked("http", "cancel")


class LateQuestionTests(_DaemonTest):
    """
    Host A gives up on its call before the upstream asked; the upstream (which ignores
    cancellation) asks A's question anyway while host B's call is alone in flight: the
    question goes to the broker, never to B, and B's own question later reaches B.

    The upstream orders its steps by what it hears, not by time: A's call asks once it
    was cancelled and B's call has arrived, and B's asks once A's call was answered.
    """

    #: A's call: asked once mcpx gave it up and B's call is in flight.
    A_ASKS_LATE: Final = {"label": "A", "until_cancelled": True, "until_arrived": "B"}
    #: B's call: asked once A's (late) call was answered, so it is alone in flight.
    B_ASKS_ALONE: Final = {"label": "B", "until_replied": "A"}
    #: An mcpx_call timeout that only giving the call up ends (the instance is warm).
    TIMEOUT: Final = 3.0

    def b_calls(self, b: Any, how: str) -> Any:
        """
        B's call, on the instance A's call went to (the fixture orders their questions by
        what that one process hears): through C{mcpx_call} after A's timed out there (the
        gateway's instance declares every question), else passed through as A's was.
        """
        if how == "timeout":
            return b.call(
                "mcpx_call", {"server": "ask", "tool": "ask", "arguments": self.B_ASKS_ALONE}
            )
        return b.call("ask", self.B_ASKS_ALONE)

    async def give_up(self, transport: str, how: str) -> None:
        await self.daemon("--stubborn")
        await self.stats()  # started, so that A's call below reaches it at once
        done: dict[str, Any] = {}

        def conversation() -> None:
            a = self.host(transport, "A")
            arguments = self.A_ASKS_LATE
            if how == "timeout":
                call = a.call(
                    "mcpx_call",
                    {
                        "server": "ask",
                        "tool": "ask",
                        "arguments": arguments,
                        "timeout": self.TIMEOUT,
                    },
                )
            else:
                call = a.call("ask", arguments)
                self.until_sent_upstream()
            if how == "cancel":
                a.cancel(call)
            elif how == "disconnect":
                a.close()
            else:
                a.response(call)
            b = self.host(transport, "B")
            b_call = self.b_calls(b, how)
            done["a"], done["b"] = a, b
            done["b_answer"] = b.response(b_call)

        talking = deferToThread(conversation)
        settled = await self.settle_broker(lambda: talking.called)
        await talking
        a, b = done["a"], done["b"]
        self.assertEqual(misroutes([a, b], lambda host: {host.name}), [])
        self.assertEqual(labels_asked(a), [])
        self.assertEqual(labels_asked(b), ["B"])
        self.assertEqual(result_text(done["b_answer"]), 'B: accept {"name": "B"}')
        self.assertEqual(settled, 1, "A's late question waited in the broker")
        [late] = [q for q in await self.questions() if q["params"]["message"].endswith(" A")]
        self.assertEqual((late["route"], late["call_id"]), ("broker", None))
        # A's mcpx_call (timing out) reached the instance the gateway declares every
        # question to; a pass-through call the one declaring what its host declared.
        stats = await self.stats(gateway=how == "timeout")
        self.assertEqual(len(stats["cancels"]), 1, "the upstream heard mcpx give up")

    async def modern_gives_up(self, how: str) -> None:
        """
        A 2026-07-28 host gives up (closes its request, or its C{mcpx_call} times out)
        before the upstream asked: the late question is nobody's.
        """
        await self.daemon("--stubborn")
        await self.stats()  # started, so that A's call below reaches it at once
        done: dict[str, Any] = {}

        def conversation() -> None:
            a = ModernHost(self.daemon_.port, "A")
            self.addCleanup(a.close)
            arguments = self.A_ASKS_LATE
            if how == "timeout":
                a.call(
                    "mcpx_call",
                    {
                        "server": "ask",
                        "tool": "ask",
                        "arguments": arguments,
                        "timeout": self.TIMEOUT,
                    },
                )
                done["a"] = a.answer()
            else:
                a.call("ask", arguments)
                self.until_sent_upstream()
                a.give_up()
            b = self.socket_host("B")
            done["b"] = b
            done["b_answer"] = b.response(self.b_calls(b, how))

        talking = deferToThread(conversation)
        settled = await self.settle_broker(lambda: talking.called)
        await talking
        self.assertEqual(labels_asked(done["b"]), ["B"])
        self.assertEqual(result_text(done["b_answer"]), 'B: accept {"name": "B"}')
        self.assertEqual(settled, 1, "A's late question waited in the broker")
        if how == "timeout":
            self.assertTrue(done["a"]["result"]["isError"], done["a"])

    async def test_modern_closes(self) -> None:
        await self.modern_gives_up("close")

    async def test_modern_timeout(self) -> None:
        await self.modern_gives_up("timeout")

    async def test_socket_cancel(self) -> None:
        await self.give_up("socket", "cancel")

    async def test_socket_timeout(self) -> None:
        await self.give_up("socket", "timeout")

    async def test_socket_disconnect(self) -> None:
        await self.give_up("socket", "disconnect")

    async def test_http_cancel(self) -> None:
        await self.give_up("http", "cancel")

    async def test_http_timeout(self) -> None:
        await self.give_up("http", "timeout")

    async def test_http_session_end(self) -> None:
        await self.give_up("http", "disconnect")


class SilentCancelTests(_DaemonTest):
    """
    An upstream that never answers a request it was told to cancel (as the TypeScript
    SDK does): the host that cancelled a call is asked its next call's question at
    once, not made to wait while the cancelled request still counts at the server.
    Another host's call after the cancel is not (its question goes to the broker, as
    in L{LateQuestionTests}).
    """

    async def test_the_same_hosts_next_question_reaches_it(self) -> None:
        for transport in ("socket", "http"):
            # One instance for everyone: the server asked (A2), so it is known to ask,
            # and the stats call would otherwise run beside the late request, on an
            # instance that heard no cancel.
            await self.daemon("--silent-cancel", MCPX_POOL_MAX_ASKING_INSTANCES="1")
            await self.stats()  # started, so that the call below reaches it at once
            done: dict[str, Any] = {}

            def conversation(transport: str = transport, done: dict[str, Any] = done) -> None:
                a = self.host(transport, "A")
                # It would ask only once cancelled, and being cancelled it says nothing.
                first = a.call("ask", {"label": "A1", "until_cancelled": True})
                self.until_sent_upstream()
                a.cancel(first)
                second = a.call("ask", {"label": "A2", "delay": 0})
                a.wait_for(lambda: len(a.asked) == 1)
                done["asked"] = labels_asked(a)
                done["answer"] = a.response(second)

            await deferToThread(conversation)
            self.assertEqual(done["asked"], ["A2"], transport)
            self.assertEqual(result_text(done["answer"]), 'A2: accept {"name": "A"}')
            stats = await self.stats()
            self.assertEqual(len(stats["cancels"]), 1, "the upstream heard the cancel")
            await self.daemon_.stop()


class CrossingCancelTests(_DaemonTest):
    """
    A cancel that crosses the upstream's question on the wire, with an upstream that
    does stop when cancelled: host A cancels within a few milliseconds of the moment the
    upstream asks, and host B starts a call at once.  Whichever arrives first, A's
    question is never shown to B (it reaches A and is withdrawn, or waits in the
    broker, or is never asked); B's own question reaches B.
    """

    async def test_cancel_crossing_the_question(self) -> None:
        # One instance for everyone: the point is the one connection both calls share.
        await self.daemon(MCPX_POOL_MAX_ASKING_INSTANCES="1")
        offsets = (0.03, 0.015, 0.005, 0.0, -0.005, -0.015)
        seen: dict[str, Any] = {"hosts": [], "withdrawn": 0, "b": []}

        def conversation() -> None:
            for n, offset in enumerate(offsets):
                a = self.socket_host(f"A{n}")
                a.answering = False
                delay = 0.3
                call = a.call("ask", {"label": a.name, "delay": delay})
                time.sleep(delay - offset)
                a.cancel(call)
                b = self.socket_host(f"B{n}")
                # B asks once A's call has ended, so its call is alone in flight then.
                answer = b.response(b.call("ask", {"label": b.name, "until_replied": a.name}))
                seen["b"].append(result_text(answer) == f'{b.name}: accept {{"name": "{b.name}"}}')
                seen["hosts"] += [a, b]
                seen["withdrawn"] += len(a.withdrawn)

        talking = deferToThread(conversation)
        in_broker = await self.settle_broker(lambda: talking.called, timeout=60)
        await talking
        hosts: list[_Host] = seen["hosts"]
        self.assertEqual(misroutes(hosts, lambda host: {host.name}), [])
        self.assertEqual(seen["b"], [True] * len(offsets), "every B answered its own question")
        print(
            f"\ncrossing cancels: {len(offsets)} trials, {seen['withdrawn']} withdrawn from A, "
            f"{in_broker} in the broker, 0 misroutes",
            file=sys.stderr,
        )
        stats = await self.stats()
        self.assertEqual(len(stats["cancels"]), len(offsets), "every cancel reached upstream")


class LoadTests(_DaemonTest):
    """
    32 capable hosts at once on a 2025-11-25 upstream that asks on its connection: once
    the pool has learned that the server asks (one overlap teaches it), each asking call
    runs on an instance of its own, so at least 95% of the questions are answered
    natively by their own host, and none is ever shown to another host.
    """

    HOSTS = 32

    async def test_32_hosts(self) -> None:
        await self.daemon()
        outcome: dict[str, Any] = {}

        def learn() -> None:
            x, y = self.socket_host("X"), self.socket_host("Y")
            # Each asks once the other's call has arrived: they overlap, however slow.
            first = x.call("ask", {"label": "X", "until_arrived": "Y"})
            second = y.call("ask", {"label": "Y", "until_arrived": "X"})
            outcome["learned"] = [x.response(first), y.response(second)]
            outcome["told"] = [
                [
                    n["params"]["data"]
                    for n in host.notifications
                    if n["method"] == "notifications/message"
                ]
                for host in (x, y)
            ]

        learning = deferToThread(learn)
        taught = await self.settle_broker(lambda: learning.called)
        await learning
        self.assertGreaterEqual(taught, 1, "the overlap's questions waited in the broker")
        for told in outcome["told"]:
            # Each host whose question may be waiting there was told how to answer it.
            self.assertTrue(told, "the host was told its question may wait in the broker")
            self.assertIn("mcpx elicit q_", told[0])

        def load() -> None:
            hosts = [self.host("socket" if n % 2 else "http", f"H{n}") for n in range(self.HOSTS)]
            calls = []
            for host in hosts:
                calls.append(host.call("ask", {"label": host.name, "delay": 0.3}))
                time.sleep(0.5 / self.HOSTS)
            outcome["answers"] = [
                host.response(call, timeout=60) for host, call in zip(hosts, calls, strict=True)
            ]
            outcome["hosts"] = hosts

        started = time.monotonic()
        loading = deferToThread(load)
        in_broker = await self.settle_broker(lambda: loading.called, timeout=60)
        await loading
        elapsed = time.monotonic() - started
        hosts: list[_Host] = outcome["hosts"]
        native = sum(
            1
            for host, answer in zip(hosts, outcome["answers"], strict=True)
            if result_text(answer) == f'{host.name}: accept {{"name": "{host.name}"}}'
        )
        self.assertEqual(misroutes(hosts, lambda host: {host.name}), [])
        print(
            f"\n32-host load: {native}/{self.HOSTS} answered natively, {in_broker} in the "
            f"broker, 0 misroutes, {elapsed:.1f}s",
            file=sys.stderr,
        )
        self.assertGreaterEqual(native / self.HOSTS, 0.95)


#: The roots configured (C{proto.roots}) in L{RootsTests}, as the upstream is told them.
CONFIGURED_ROOTS = ["file:///srv/configured"]


class StrictRefusalTests(_DaemonTest):
    """
    A 2026-07-28 call in pass-through whose upstream asks what its client did not
    declare is refused with -32021, whether or not the client declared the tasks
    extension (whose calls may become tasks).
    """

    async def refused(self, capabilities: dict[str, Any]) -> dict[str, Any]:
        await self.daemon()

        def conversation() -> dict[str, Any]:
            host = ModernHost(self.daemon_.port, "A", capabilities=capabilities)
            self.addCleanup(host.close)
            host.call("ask", {"label": "A"})
            return host.answer()

        answer: dict[str, Any] = await deferToThread(conversation)
        self.assertEqual(
            answer.get("error"),
            {
                "code": MISSING_REQUIRED_CLIENT_CAPABILITY,
                "message": answer.get("error", {}).get("message"),
                "data": {"requiredCapabilities": {"elicitation": {}}},
            },
            answer,
        )
        self.assertEqual(await self.questions(), [])
        return answer

    async def test_undeclared(self) -> None:
        """A client that declared nothing."""
        await self.refused({})

    async def test_tasks_extension(self) -> None:
        """A client that declared only the tasks extension: its call goes another way."""
        await self.refused({"extensions": {TASKS_EXTENSION: {}}})


class RootsTests(_DaemonTest):
    """
    Roots stay with their host (issue 41).  A server that takes its allowed directories
    from its client's roots, asked at start (outside any call) and again on each
    C{notifications/roots/list_changed}, with two servers passed through: inside a call
    it gets the roots of that call's host; outside any call a C{shared} instance gets
    the configured roots (C{proto.roots}), never those of whichever host declared roots
    last, and is not told of one host's change; a C{client}-scoped instance, its own
    host's, and hears of its own host's changes alone.
    """

    async def daemon_with_roots(self, scope: str = "shared") -> Daemon:
        servers = {
            "ask": {**asking_server("--ask-roots-at-start"), "scope": scope},
            "other": {**asking_server("--prefix=other_"), "scope": scope},
        }
        settings = {"MCPX_PROTO_ROOTS": CONFIGURED_ROOTS[0]}
        self.daemon_ = await Daemon(self, servers, settings=settings).start()
        return self.daemon_

    def roots_host(self, name: str, path: str) -> SocketHost:
        return self.socket_host(
            name,
            capabilities=ROOTS_HOST,
            passthrough=["ask", "other"],
            roots=({"uri": f"file://{path}", "name": name},),
        )

    async def roots_seen(self, count: int, host: SocketHost | None = None) -> list[Any]:
        # Of the shared instance the roots hosts reach: one declaring roots alone.
        """
        What the upstream's roots/list asks outside calls got, once there are C{count}:
        of the shared instance, or of C{host}'s own instance of a client-scoped one.
        """
        deadline = time.monotonic() + 20
        while True:
            if host is None:
                stats = await self.stats(ROOTS_HOST)
            else:
                answer = await deferToThread(lambda: host.response(host.call("stats", {})))
                stats = json.loads(result_text(answer))
            seen: list[Any] = stats["roots"]
            if len(seen) >= count or time.monotonic() > deadline:
                return seen
            await deferLater(reactor, 0.1, lambda: None)

    def listing(self, name: str, path: str) -> SocketHost:
        """A roots host that lists the tools (its pass-through servers start for it)."""
        host = self.roots_host(name, path)
        listed = host.response(host.request("tools/list", {}))
        names = {tool["name"] for tool in listed["result"]["tools"]}
        self.assertTrue({"ask", "roots", "stats"} <= names, listed)
        return host

    def roots_in_calls(self, host: _Host) -> list[str]:
        """What the upstream's roots/list inside C{host}'s calls got, pass-through and not."""
        return [
            result_text(host.response(host.call("roots", {}))),
            result_text(host.response(host.call("mcpx_call", {"server": "ask", "tool": "roots"}))),
        ]

    async def test_shared_instance_roots_stay_with_their_host(self) -> None:
        """
        Two hosts with different roots on one shared instance: asked at its start (A's
        listing started it), the server gets the configured roots, not A's; A's and B's
        changes are not passed to it, so nothing else is asked outside a call; inside
        each host's calls it gets that host's roots; a host that declared no roots gets
        the configured ones inside its call, never A's or B's.
        """
        await self.daemon_with_roots()
        a = await deferToThread(self.listing, "A", "/srv/a")
        self.assertEqual(await self.roots_seen(1), [CONFIGURED_ROOTS])

        def change() -> SocketHost:
            a.roots = [{"uri": "file:///srv/a2"}]
            a.notify("notifications/roots/list_changed")
            b = self.listing("B", "/srv/b")
            b.notify("notifications/roots/list_changed")
            return b

        b = await deferToThread(change)
        self.assertEqual(
            await deferToThread(lambda: [self.roots_in_calls(h) for h in (a, b)]),
            [['["file:///srv/a2"]'] * 2, ['["file:///srv/b"]'] * 2],
        )

        def rootless() -> list[str]:
            # Declares elicitation, not roots: its call's client cannot give any.
            c = self.socket_host("C", passthrough=["ask", "other"])
            return self.roots_in_calls(c)

        configured = json.dumps(CONFIGURED_ROOTS)
        self.assertEqual(await deferToThread(rootless), [configured, configured])
        # Outside any call, only ever the configured roots: the hosts' changes reached
        # neither shared instance (each would have asked again).
        self.assertEqual((await self.stats(ROOTS_HOST))["roots"], [CONFIGURED_ROOTS])
        records = [q for q in await self.questions() if q["method"] == "roots/list"]
        answered = [
            ([root["uri"] for root in q["answer"]["roots"]], q["answered_by"]) for q in records
        ]
        theirs = [(["file:///srv/a2"], "client")] * 2 + [(["file:///srv/b"], "client")] * 2
        mcpx = (CONFIGURED_ROOTS, "mcpx")
        # Every other roots/list got the configured roots: the instance A's listing
        # started, asking at its start; C's calls; and the starts of the instances
        # mcpx_call and C reached, which declare other questions than the roots hosts
        # (mcpx declares upstream no more than a pass-through host did), in whatever
        # order those starts came.
        self.assertEqual(answered[0], mcpx, records)
        self.assertEqual([a for a in answered if a[1] == "client"], theirs, records)
        self.assertEqual([a for a in answered if a[1] != "client"], [mcpx] * (len(answered) - 4))
        self.assertGreaterEqual(len(answered), 7, records)

    async def test_client_scoped_instance_roots_are_its_hosts(self) -> None:
        """
        Two hosts with different roots, each with its own instance (scope client): asked
        at its start, each instance gets its own host's roots, and hears of its own
        host's change alone.
        """
        await self.daemon_with_roots("client")

        def asked(host: SocketHost, count: int) -> None:
            # Its instances' roots/list outside a call reached the host (and was
            # answered) before a call of its own could be taken for the asker.
            host.wait_for(lambda: len(host.asked) >= count)

        a = await deferToThread(self.listing, "A", "/srv/a")
        await deferToThread(asked, a, 1)
        self.assertEqual(await self.roots_seen(1, a), [["file:///srv/a"]])
        b = await deferToThread(self.listing, "B", "/srv/b")
        await deferToThread(asked, b, 1)
        self.assertEqual(await self.roots_seen(1, b), [["file:///srv/b"]])

        def change() -> None:
            a.roots = [{"uri": "file:///srv/a2"}]
            a.notify("notifications/roots/list_changed")
            # Both of A's instances ask again (other's ask alone counted before, so a
            # stats call could meet ask's question on the way).
            asked(a, 3)

        await deferToThread(change)
        self.assertEqual(await self.roots_seen(2, a), [["file:///srv/a"], ["file:///srv/a2"]])
        self.assertEqual(await self.roots_seen(1, b), [["file:///srv/b"]])
        self.assertEqual(
            await deferToThread(lambda: [self.roots_in_calls(h) for h in (a, b)]),
            [['["file:///srv/a2"]'] * 2, ['["file:///srv/b"]'] * 2],
        )

    async def test_question_outside_a_call_outlives_the_call_in_flight(self) -> None:
        """
        A client-scoped server asks for roots outside any call while its host's call is
        the only one in flight there, and answers that call before the host answers:
        the host is asked all the same and its answer reaches the server, which is not
        refused for the end of a call its question was never part of.
        """
        await self.daemon_with_roots("client")

        def conversation() -> SocketHost:
            a = self.listing("A", "/srv/a")
            a.wait_for(lambda: len(a.asked) >= 1)  # its instance's roots/list at start
            a.answering = False
            a.response(a.call("stats", {"ask_roots_outside": True}))
            # The call has ended; only now does the host answer the question it was put.
            a.wait_for(lambda: len(a.asked) >= 2)
            a.answer(a.asked[1])
            a.answering = True
            return a

        a = await deferToThread(conversation)
        self.assertEqual(await self.roots_seen(2, a), [["file:///srv/a"], ["file:///srv/a"]])
        self.assertEqual(a.withdrawn, [])

    async def test_sdk_host_over_serve(self) -> None:
        """
        The MCP Python SDK as the host, through C{mcpx serve --passthrough ask,other},
        both servers client-scoped: its roots callback answers its own instance's
        roots/list at start, and after the host says its roots changed both of its
        instances ask again and get the new ones.
        """
        await self.daemon_with_roots("client")
        daemon = self.daemon_
        current = ["file:///srv/sdk"]
        asked: list[int] = []

        async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
            asked.append(1)
            return types.ListRootsResult(
                roots=[types.Root.model_validate({"uri": uri}) for uri in current]
            )

        async def conversation() -> Any:
            target = daemon.serve("ask,other")
            async with Client(
                target, mode="legacy", list_roots_callback=list_roots, cache=None
            ) as client:
                await client.list_tools()
                for _ in range(600):
                    if asked:
                        break
                    await anyio.sleep(0.05)
                current[:] = ["file:///srv/sdk2"]
                await client.send_roots_list_changed()
                for _ in range(600):
                    if len(asked) > 2:
                        break
                    await anyio.sleep(0.05)
                # The server applies an answer on its own time: look until it has both.
                for _ in range(600):
                    stats = await client.call_tool("stats", {})
                    seen = json.loads(" ".join(getattr(b, "text", "") for b in stats.content))
                    if len(seen["roots"]) >= 2:
                        break
                    await anyio.sleep(0.05)
                return seen

        stats = await in_thread(conversation)
        self.assertEqual(stats["roots"], [["file:///srv/sdk"], ["file:///srv/sdk2"]])
        # Asked by ask at its start, then by both servers on hearing of the change.
        self.assertEqual(len(asked), 3)
