"""
Tests for L{mcpx.server.sign_in_offers}: which hosts are offered a sign-in, in which
shape, and what a declined offer or a host on an older revision gets (today's error).
"""

from __future__ import annotations

import itertools
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactor
from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth.host_signin import HostSignIns
from mcpx.auth.signin import SignIns
from mcpx.auth.store import TokenStore
from mcpx.server.conn import Conn
from mcpx.server.dispatch import McpServer
from mcpx.server.results import text_result
from mcpx.server.sign_in_offers import INPUT_KEY
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.servers import ServersConfig
from mcpx.spec.feature import TASKS_EXTENSION as EXTENSION
from mcpx.wire.errors import URL_ELICITATION_REQUIRED, RpcError
from mcpx.wire.messages import Request
from tests.auth.test_flow import stub
from tests.auth.test_signin import ProtectedServers, remote
from tests.daemon.fake_pool import FakePool, FakeServer, default_settings, ops_host
from tests.server import gateway_servers, modern_meta, result_of, servers_config

#: What the pool answers a call to the server nobody signed in to (as the real one does).
NEEDS = "remote needs a sign-in; run `mcpx auth login remote`"
CALL: dict[str, Any] = {
    "name": "mcpx_call",
    "arguments": {"server": "remote", "tool": "echo", "arguments": {}},
}
URL_ELICITATION: dict[str, Any] = {"elicitation": {"url": {}}}


class Gateway:
    def __init__(self, *, shared: bool = False) -> None:
        self.clock = Clock()
        fakes = gateway_servers()
        fakes["remote"] = FakeServer(
            "remote", answers={"tools/call": text_result(NEEDS, is_error=True)}
        )
        self.pool = FakePool(fakes, hold=False)
        servers = dict(servers_config("files", "search").servers)
        servers["remote"] = remote({"type": "oauth", "shared": True} if shared else None)
        sign_ins = SignIns(stub(ProtectedServers()), self.clock, TokenStore(None), SecretMasker())
        self.hosted = HostSignIns(sign_ins, MemoryReactor(), self.clock)
        self.host = ops_host(
            self.clock,
            1,
            pool=self.pool,
            settings=default_settings(),
            servers=ServersConfig(servers, "test"),
            host_sign_ins=self.hosted,
        )
        self.server = McpServer(self.host, self.clock)
        self.pushed: list[tuple[str, Any]] = []
        self._ids = itertools.count(1)

    def handle(self, conn: Conn, method: str, params: dict[str, Any]) -> Deferred[Any]:
        request = Request(next(self._ids), method, params)
        return Deferred.fromCoroutine(self.server.handle(conn, request))

    def legacy(
        self, revision: str, capabilities: dict[str, Any], subject: str | None = None
    ) -> Conn:
        conn = self.server.open(
            Conn(
                "stdio",
                "host",
                push=lambda method, params: self.pushed.append((method, params)),
                subject=subject,
            )
        )
        initialize = {"protocolVersion": revision, "capabilities": capabilities}
        result_of(self.handle(conn, "initialize", initialize))
        return conn

    def modern(self, capabilities: dict[str, Any], **extra: Any) -> Deferred[Any]:
        conn = self.server.open(Conn("http-modern", "host"))
        return self.handle(
            conn, "tools/call", {**CALL, "_meta": modern_meta(capabilities), **extra}
        )


class SignInOfferTests(SynchronousTestCase):
    def test_legacy_gets_url_elicitation_required(self) -> None:
        """
        2025-11-25 with URL elicitation: -32042 with one URL elicitation; the host is
        told elicitation/complete on its connection once the user has signed in.
        """
        gateway = Gateway()
        conn = gateway.legacy("2025-11-25", URL_ELICITATION)
        failure = self.failureResultOf(gateway.handle(conn, "tools/call", CALL), RpcError)
        error = failure.value
        assert isinstance(error, RpcError)
        self.assertEqual(error.code, URL_ELICITATION_REQUIRED)
        (elicitation,) = error.data["elicitations"]
        self.assertEqual(sorted(elicitation), ["elicitationId", "message", "mode", "url"])
        self.assertEqual(gateway.pool.calls, [])
        offer = gateway.hosted.pending("remote")
        assert offer is not None
        self.assertEqual(elicitation["url"], offer.url)
        for done in offer.waiters.values():
            done()
        self.assertEqual(
            gateway.pushed,
            [
                (
                    "notifications/elicitation/complete",
                    {"elicitationId": elicitation["elicitationId"]},
                )
            ],
        )

    def test_older_or_undeclared_get_the_old_error(self) -> None:
        """
        A 2025-11-25 host declaring form elicitation only, and a 2025-06-18 host
        declaring url (a mode its revision lacks), get the tool error naming mcpx auth
        login; no sign-in is offered.
        """
        gateway = Gateway()
        for revision, capabilities in (
            ("2025-11-25", {"elicitation": {"form": {}}}),
            ("2025-06-18", URL_ELICITATION),
        ):
            conn = gateway.legacy(revision, capabilities)
            result = result_of(gateway.handle(conn, "tools/call", CALL))
            self.assertTrue(result["isError"])
            self.assertIn("mcpx auth login remote", result["content"][0]["text"])
        self.assertIsNone(gateway.hosted.pending("remote"))

    def test_subject_offered_its_own_sign_in(self) -> None:
        """
        A host let in with an access token (daemon.auth oauth) is offered a sign-in of
        its subject's own, never the owner's: the offer waits under the subject, and
        the owner has none.
        """
        gateway = Gateway()
        conn = gateway.legacy("2025-11-25", URL_ELICITATION, subject="alice")
        failure = self.failureResultOf(gateway.handle(conn, "tools/call", CALL), RpcError)
        self.assertEqual(failure.value.code, URL_ELICITATION_REQUIRED)
        offer = gateway.hosted.pending("remote", 'subject:"alice"')
        assert offer is not None
        self.assertEqual(offer.principal, 'subject:"alice"')
        self.assertIsNone(gateway.hosted.pending("remote"))
        self.assertIsNone(gateway.hosted.pending("remote", 'subject:"bob"'))

    def test_shared_sign_in_not_offered_to_subjects(self) -> None:
        """
        A server whose sign-in is the owner's, shared with everyone ("shared": true), is
        not offered to a host let in with an access token: it gets the error.
        """
        gateway = Gateway(shared=True)
        conn = gateway.legacy("2025-11-25", URL_ELICITATION, subject="alice")
        result = result_of(gateway.handle(conn, "tools/call", CALL))
        self.assertTrue(result["isError"])
        self.assertIn("mcpx auth login remote", result["content"][0]["text"])
        self.assertIsNone(gateway.hosted.pending("remote"))
        self.assertIsNone(gateway.hosted.pending("remote", 'subject:"alice"'))

    def test_modern_input_required_then_declined(self) -> None:
        """
        2026-07-28 with URL elicitation: input_required with the URL; a retry accepting
        before the sign-in is done is asked the same URL; one declining gets the error.
        """
        gateway = Gateway()
        first = result_of(gateway.modern(URL_ELICITATION))
        self.assertEqual(first["resultType"], "input_required")
        asked = first["inputRequests"][INPUT_KEY]
        self.assertEqual(asked["method"], "elicitation/create")
        self.assertEqual(asked["params"]["mode"], "url")
        self.assertNotIn("elicitationId", asked["params"])
        accepted = {INPUT_KEY: {"action": "accept"}}
        again = result_of(gateway.modern(URL_ELICITATION, inputResponses=accepted))
        self.assertEqual(again["inputRequests"], first["inputRequests"])
        self.assertEqual(gateway.pool.calls, [])
        declined = {INPUT_KEY: {"action": "decline"}}
        refused = result_of(gateway.modern(URL_ELICITATION, inputResponses=declined))
        self.assertTrue(refused["isError"])
        self.assertIn("mcpx auth login remote", refused["content"][0]["text"])

    def test_modern_with_the_tasks_extension(self) -> None:
        """A call that could become an extension task is offered the sign-in first."""
        gateway = Gateway()
        declared = {**URL_ELICITATION, "extensions": {EXTENSION: {}}}
        first = result_of(gateway.modern(declared))
        self.assertEqual(first["resultType"], "input_required")
        self.assertEqual(first["inputRequests"][INPUT_KEY]["params"]["mode"], "url")
        self.assertEqual(gateway.pool.calls, [])

    def test_modern_without_url_elicitation(self) -> None:
        """A 2026-07-28 request declaring form elicitation only gets the old error."""
        gateway = Gateway()
        result = result_of(gateway.modern({"elicitation": {"form": {}}}))
        self.assertTrue(result["isError"])
        self.assertIsNone(gateway.hosted.pending("remote"))

    def test_other_servers_untouched(self) -> None:
        """A call to a server without OAuth runs as before for a host declaring url."""
        gateway = Gateway()
        conn = gateway.legacy("2025-11-25", URL_ELICITATION)
        call = {"name": "mcpx_call", "arguments": {"server": "search", "tool": "web_search"}}
        result_of(gateway.handle(conn, "tools/call", call))
        self.assertEqual([c[0] for c in gateway.pool.calls], ["search"])
