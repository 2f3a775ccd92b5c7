"""
Two daemons' MCP servers on one PostgreSQL database (a throw-away cluster,
L{tests.support.postgres}), sharing one C{proto.stateKeyFile}: a 2026-07-28 retry whose
C{requestState} daemon A issued, sent to daemon B, is verified there, reaches A's waiting
call through the store and is answered with what that call comes to; a state is honoured
once in the fleet; another principal's state is refused on both; an owner that died ends
the retry with a clear error; a rotated key still verifies.

Each daemon is an L{McpServer} over a L{FakePool} (L{tests.server.test_asking.Gateway})
with a heartbeat in the store; the stores run on the real reactor's threads, each daemon
keeps time by a L{Clock} of its own.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp import Client
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from mcpx.server.conn import Conn
from mcpx.spec.questions import ELICIT
from mcpx.store.heartbeat import EVERY, TIMEOUT, Heartbeat
from mcpx.store.postgres import PostgresRecords
from mcpx.store.records import ROUNDS
from mcpx.wire.errors import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from tests.daemon.fake_pool import text_result
from tests.questions.support import MODERN, demo_server
from tests.questions.support import Daemon as DaemonProcess
from tests.questions.test_end_to_end import Answerer, texts, wire
from tests.server.test_asking import (
    ACCEPTED,
    ELICITING,
    FORM,
    OTHER_FORM,
    PAGES,
    Gateway,
    call_params,
    resumable,
    rounds_of,
)
from tests.server.test_peers import in_thread
from tests.support.postgres import PASSWORD, PostgresCluster, shared_cluster

SECRET_1 = base64.urlsafe_b64encode(b"1" * 32).decode().rstrip("=")
SECRET_2 = base64.urlsafe_b64encode(b"2" * 32).decode().rstrip("=")


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait (at most ten seconds) for C{condition}, which the store's threads make true."""
    for _ in range(400):
        if condition():
            return
        await deferLater(reactor, 0.025, lambda: None)
    raise AssertionError("never happened: " + what)


async def outcome(deferred: Deferred[Any]) -> Any:
    """What C{deferred} fires with, or the failure it fails with (not raised)."""
    try:
        return await deferred
    except Exception:
        return Failure()


def payload_of(state: str) -> dict[str, Any]:
    payload = state.partition(".")[0]
    body: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return body


class Daemon:
    """One daemon of the test's fleet: its gateway, store and heartbeat."""

    def __init__(self, gateway: Gateway, records: PostgresRecords, beat: Heartbeat) -> None:
        self.gateway = gateway
        self.records = records
        self.beat = beat
        self.conns: dict[str | None, Conn] = {}

    @property
    def clock(self) -> Any:
        return self.gateway.clock

    def conn(self, subject: str | None = None) -> Conn:
        if subject not in self.conns:
            self.conns[subject] = self.gateway.server.open(
                Conn("http-modern", "host", subject=subject)
            )
        return self.conns[subject]

    def call(self, subject: str | None = None) -> Deferred[Any]:
        return self.gateway.handle(self.conn(subject), "tools/call", call_params(ELICITING))

    def retry(
        self, state: str, responses: dict[str, Any], subject: str | None = None
    ) -> Deferred[Any]:
        params = {**call_params(ELICITING), "inputResponses": responses, "requestState": state}
        return self.gateway.handle(self.conn(subject), "tools/call", params)


class FleetRoundTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.cluster: PostgresCluster = shared_cluster()
        self.url = self.cluster.url(self.cluster.database())
        self.key_file = os.path.abspath(self.mktemp())
        self.write_keys(f"k1 0 {SECRET_1}\n")

    def write_keys(self, text: str) -> None:
        with open(self.key_file, "w") as f:
            f.write(text)
        os.chmod(self.key_file, 0o600)

    async def daemon(self, name: str) -> Daemon:
        gateway = Gateway(settings={"proto.stateKeyFile": self.key_file})
        records = PostgresRecords(self.url, reactor, password=PASSWORD, threads=2)
        await records.open()
        self.addCleanup(records.close)
        # Beats on a connection pool of their own, so a test can cut the daemon's rounds
        # off the store (a killed daemon) while its last beat ages on its own clock.
        beats = PostgresRecords(self.url, reactor, password=PASSWORD, threads=1)
        self.addCleanup(beats.close)
        beat = Heartbeat(gateway.clock, beats, name)
        await beat.start()
        self.addCleanup(beat.stop)
        gateway.server.asking.share(records, name)
        self.addCleanup(gateway.server.asking.rounds.stop)
        return Daemon(gateway, records, beat)

    async def asked(self, daemon: Daemon, subject: str | None = None) -> tuple[str, Deferred[Any]]:
        """A call on C{daemon} whose upstream asks L{FORM}: its state, the question."""
        answering = daemon.call(subject)
        question = resumable(daemon.gateway.caller()).ask(ELICIT, FORM, "q1")
        daemon.clock.advance(0)
        answer = await answering
        self.assertEqual(answer["resultType"], "input_required")
        state: str = answer["requestState"]
        return state, question

    def refusal(self, result: Any) -> RpcError:
        self.assertIsInstance(result, Failure)
        error = result.value
        assert isinstance(error, RpcError), error
        return error

    async def test_retry_on_another_daemon_completes_the_call(self) -> None:
        """
        A state daemon A issued, sent with its answers to daemon B, is verified on B; the
        answer reaches the question of A's waiting upstream call, a second question of
        that call comes back to B's client as the next round (a state A issued again),
        and the retry of that round, through B too, gets the call's result.
        """
        a = await self.daemon("d_a")
        b = await self.daemon("d_b")
        state, question = await self.asked(a)
        self.assertEqual(payload_of(state)["d"], "d_a")
        retrying = b.retry(state, {"q1": ACCEPTED})
        self.assertEqual(await question, ACCEPTED)
        second = resumable(a.gateway.caller()).ask(ELICIT, OTHER_FORM, "q2")
        a.clock.advance(0)
        again = await retrying
        self.assertEqual(again["resultType"], "input_required")
        self.assertEqual(again["inputRequests"], {"q2": {"method": ELICIT, "params": OTHER_FORM}})
        self.assertEqual(rounds_of(again["requestState"]), 2)
        self.assertEqual(payload_of(again["requestState"])["d"], "d_a")
        last = b.retry(again["requestState"], {"q2": PAGES})
        self.assertEqual(await second, PAGES)
        a.gateway.held().result.callback(text_result("found it"))
        final = await last
        self.assertEqual(final["resultType"], "complete")
        self.assertEqual(final["content"], [{"type": "text", "text": "found it"}])
        # The upstream was called once, on A; B's pool was never asked.
        self.assertEqual((len(a.gateway.pool.calls), len(b.gateway.pool.calls)), (1, 0))

    async def test_replay_refused_on_both(self) -> None:
        """
        One state sent to both daemons at once is honoured once: one retry reaches the
        call, the other is refused as already used; sent again afterwards, it is refused
        on each daemon, and its answers never reach the call a second time.
        """
        a = await self.daemon("d_a")
        b = await self.daemon("d_b")
        state, question = await self.asked(a)
        on_a = a.retry(state, {"q1": ACCEPTED})
        on_b = b.retry(state, {"q1": {"action": "accept", "content": {"site": "other.org"}}})
        self.assertIn(
            await question, (ACCEPTED, {"action": "accept", "content": {"site": "other.org"}})
        )
        a.gateway.held().result.callback(text_result("once"))
        results = [await outcome(on_a), await outcome(on_b)]
        refused = [r for r in results if isinstance(r, Failure)]
        honoured = [r for r in results if not isinstance(r, Failure)]
        self.assertEqual(len(refused), 1, results)
        self.assertEqual(honoured[0]["content"][0]["text"], "once")
        self.assertIn("already used", self.refusal(refused[0]).message)
        for daemon in (a, b):
            error = self.refusal(await outcome(daemon.retry(state, {"q1": ACCEPTED})))
            self.assertEqual(error.code, INVALID_PARAMS)
            self.assertIn("already used", error.message)

    async def test_other_principal_refused_on_every_daemon(self) -> None:
        """
        A state issued to alice's request, sent back by bob, is refused on the daemon that
        issued it and on the other, naming neither; alice's own retry still works after.
        """
        a = await self.daemon("d_a")
        b = await self.daemon("d_b")
        state, question = await self.asked(a, subject="alice")
        for daemon in (a, b):
            error = self.refusal(await outcome(daemon.retry(state, {"q1": ACCEPTED}, "bob")))
            self.assertEqual(error.code, INVALID_PARAMS)
            self.assertIn("issued to another caller", error.message)
            self.assertNotIn("alice", error.message)
        self.assertNoResult(question)
        retrying = b.retry(state, {"q1": ACCEPTED}, "alice")
        self.assertEqual(await question, ACCEPTED)
        a.gateway.held().result.callback(text_result("alice's"))
        self.assertEqual((await retrying)["content"][0]["text"], "alice's")

    async def test_owner_dead_before_the_retry(self) -> None:
        """
        A retry for a call held by a daemon with no heartbeat for longer than the timeout
        is refused at once with an error naming that daemon, and its state stays unused.
        """
        a = await self.daemon("d_a")
        b = await self.daemon("d_b")
        state, _ = await self.asked(a)
        # A is killed: it hears nothing, and beats no more (its clock stands still).
        await a.records.close()
        b.clock.advance(TIMEOUT + EVERY)
        error = self.refusal(await outcome(b.retry(state, {"q1": ACCEPTED})))
        self.assertEqual(error.code, INTERNAL_ERROR)
        self.assertIn("d_a, which has stopped", error.message)
        self.assertIn("without requestState", error.message)
        nonce = payload_of(state)["n"]
        record = await b.records.get(ROUNDS, nonce)
        self.assertEqual(record.state if record else None, "issued")

    async def test_owner_dies_while_the_retry_waits(self) -> None:
        """
        A retry relayed to a daemon that dies before answering ends with that error at
        B's next look once A's heartbeat is stale, not with a hang.
        """
        a = await self.daemon("d_a")
        b = await self.daemon("d_b")
        state, question = await self.asked(a)
        # A stops listening (and beating), as if its process hung up and died.
        await a.records.close()
        retrying = b.retry(state, {"q1": ACCEPTED})
        nonce = payload_of(state)["n"]
        await until(lambda: nonce in b.gateway.server.asking.rounds._timers, "B waits for A")
        self.assertNoResult(retrying)
        for _ in range(int(TIMEOUT / EVERY) + 2):
            if retrying.called:
                break
            b.clock.advance(EVERY)
            await deferLater(reactor, 0.1, lambda: None)
        await until(lambda: retrying.called, "B gives up on A")
        error = self.refusal(await outcome(retrying))
        self.assertIn("d_a, which has stopped", error.message)
        self.assertNoResult(question)

    async def test_owners_refusal_comes_back(self) -> None:
        """
        A retry relayed to a daemon that no longer holds the call (it finished and was
        forgotten after proto.askTTL there) gets that daemon's refusal, through B.
        """
        a = await self.daemon("d_a")
        b = await self.daemon("d_b")
        state, question = await self.asked(a)
        question.addErrback(lambda _: None)
        a.gateway.held().result.callback(text_result("done long ago"))
        a.clock.advance(901)
        error = self.refusal(await outcome(b.retry(state, {"q1": ACCEPTED})))
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertIn("names a call mcpx no longer holds", error.message)

    async def test_retry_across_a_postgres_restart(self) -> None:
        """
        PostgreSQL restarted between a round and its retry through B: both daemons
        reconnect by themselves, the owner finds the round taken while it was not
        listening, and the retry gets the call's result.
        """
        a = await self.daemon("d_a")
        b = await self.daemon("d_b")
        state, question = await self.asked(a)
        await deferToThread(self.cluster.restart)
        retrying = b.retry(state, {"q1": ACCEPTED})
        self.assertEqual(await question, ACCEPTED)
        a.gateway.held().result.callback(text_result("after the restart"))
        final = await retrying
        self.assertEqual(final["content"][0]["text"], "after the restart")

    async def test_rotated_key_verifies_across_daemons(self) -> None:
        """
        After the shared key file gains a newer key, a state A signed with the old one
        is still honoured through B, and the next round's state is signed with the new.
        """
        a = await self.daemon("d_a")
        b = await self.daemon("d_b")
        state, question = await self.asked(a)
        self.assertEqual(payload_of(state)["k"], "k1")
        self.write_keys(f"k1 0 {SECRET_1}\nk2 10 {SECRET_2}\n")
        for daemon in (a, b):
            daemon.clock.advance(11)
        retrying = b.retry(state, {"q1": ACCEPTED})
        self.assertEqual(await question, ACCEPTED)
        resumable(a.gateway.caller()).ask(ELICIT, OTHER_FORM, "q2")
        a.clock.advance(0)
        again = await retrying
        self.assertEqual(payload_of(again["requestState"])["k"], "k2")


class FleetDaemonsRetryTests(TestCase):
    """
    Two C{mcpx daemon} processes on one database and one key file, a 2026-07-28 SDK client
    of each: the demo's C{ask}, called through the first, is answered C{input_required};
    its retry, sent to the second, reaches the call on the first, and gets the answer back.
    """

    timeout = 120

    async def test_retry_through_the_other_daemon(self) -> None:
        cluster = shared_cluster()
        key_file = os.path.abspath(self.mktemp())
        with open(key_file, "w") as f:
            f.write(f"k1 0 {SECRET_1}\n")
        os.chmod(key_file, 0o600)
        settings = {
            "MCPX_STORE_URL": cluster.url(cluster.database()),
            "MCPX_STORE_PASSWORD_FILE": str(cluster.password_file),
            "MCPX_PROTO_STATE_KEY_FILE": key_file,
        }
        first = await DaemonProcess(self, {"demo": demo_server()}, settings=settings).start()
        second = await DaemonProcess(self, {"demo": demo_server()}, settings=settings).start()
        declares = Answerer()
        arguments = {"server": "demo", "tool": "ask", "arguments": {}}

        async def conversation() -> tuple[dict[str, Any], dict[str, Any]]:
            async with Client(
                first.mcp_url, mode=MODERN, elicitation_callback=declares.elicit, cache=None
            ) as client:
                asked = await client.session.call_tool(
                    "mcpx_call", arguments, allow_input_required=True
                )
            assert isinstance(asked, types.InputRequiredResult), asked
            [key] = asked.input_requests or {}
            async with Client(
                second.mcp_url, mode=MODERN, elicitation_callback=declares.elicit, cache=None
            ) as client:
                final = await client.session.call_tool(
                    "mcpx_call",
                    arguments,
                    input_responses={
                        key: types.ElicitResult(action="accept", content={"answer": "Ada"})
                    },
                    request_state=asked.request_state,
                    allow_input_required=True,
                )
            return wire(asked), wire(final)

        asked, final = await in_thread(conversation)
        self.assertEqual(asked["resultType"], "input_required")
        self.assertEqual(final.get("resultType", "complete"), "complete", final)
        self.assertIn("Ada", texts(final))
        self.assertEqual(declares.asked, [], "the SDK's own driver did not answer")
        for daemon in (second, first):
            self.assertEqual(await daemon.stop(), 0, daemon.log()[-4000:])
            self.assertEqual(daemon.log_lines("error") + daemon.log_lines("critical"), [])
            self.assertNotIn(SECRET_1, daemon.log())
