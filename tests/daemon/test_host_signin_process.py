"""
Signing in from the host: a real daemon with an OAuth server entry nobody has signed in
to, its authorization server the stand-in issuer (with sign-in endpoints), and the MCP
Python SDK as the host.  A host that declared URL elicitation is offered the sign-in
(C{-32042} at 2025-11-25, C{input_required} at 2026-07-28); the test follows the URL as
a browser would, and the host's retry reaches the server with the user's token.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.context import ClientRequestContext
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase
from twisted.web.server import Site

from tests.auth.signin_issuer import USER_TOKEN, SignedInUpstream, SigningInIssuer
from tests.questions.support import MODERN, Daemon, in_thread
from tests.questions.test_end_to_end import texts, wire
from tests.support.peers import node22
from tests.support.processes import REPO, reactor

#: The TypeScript SDK v2 host that opens the URLs it is asked to (tests/peers).
TS_HOST = REPO / "tests" / "peers" / "signin-host.mjs"

CALL = {"server": "remote", "tool": "echo", "arguments": {}}


def browse(url: str) -> tuple[int, str]:
    """What a browser does with the URL: GET it, following redirects; status and page."""
    try:
        with urllib.request.urlopen(url, timeout=20) as page:
            return page.status, page.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class HostSignInTests(TestCase):
    timeout = 90

    def setUp(self) -> None:
        issuer_port = reactor.listenTCP(0, Site(SigningInIssuer("")), interface="127.0.0.1")
        self.addCleanup(issuer_port.stopListening)
        issuer = f"http://127.0.0.1:{issuer_port.getHost().port}/realms/tools"
        self.issuer = SigningInIssuer(issuer)
        issuer_port.factory.resource = self.issuer
        self.upstream = SignedInUpstream(issuer)
        upstream_port = reactor.listenTCP(0, Site(self.upstream), interface="127.0.0.1")
        self.addCleanup(upstream_port.stopListening)
        self.upstream.base = f"http://127.0.0.1:{upstream_port.getHost().port}"
        server = {"url": self.upstream.base + "/mcp", "auth": {"type": "oauth"}}
        self.daemon = Daemon(self, {"remote": server})

    def tokens_seen(self) -> list[bytes]:
        """The C{Authorization} headers the upstream accepted a call with."""
        return [
            value
            for headers in self.upstream.seen
            for name, value in headers
            if name.lower() == b"authorization"
        ]

    def check_url(self, url: str) -> None:
        """The URL is the issuer's authorization endpoint, with PKCE, state and resource."""
        query = parse_qs(urlsplit(url).query)
        self.assertTrue(url.startswith(self.issuer.issuer + "/authorize?"), url)
        self.assertEqual(query["code_challenge_method"], ["S256"])
        self.assertEqual(query["resource"], [self.upstream.base + "/mcp"])
        self.assertTrue(query["state"][0])
        self.assertTrue(query["redirect_uri"][0].startswith("http://127.0.0.1:"))

    async def test_legacy_host_signs_in(self) -> None:
        """
        A 2025-11-25 host that declared URL elicitation: its call fails with -32042
        carrying the authorization URL; a forged redirect is refused; the browser's
        real one signs in, the host hears notifications/elicitation/complete, and its
        retry succeeds with the user's token upstream.
        """
        await self.daemon.start()
        asked: list[dict[str, Any]] = []

        async def elicit(
            context: ClientRequestContext, params: types.ElicitRequestParams
        ) -> types.ElicitResult:
            asked.append(wire(params))
            return types.ElicitResult(action="decline")

        async def conversation() -> dict[str, Any]:
            completed = anyio.Event()
            heard: list[str] = []

            async def on_message(message: Any) -> None:
                if isinstance(message, types.ElicitCompleteNotification):
                    heard.append(message.params.elicitation_id)
                    completed.set()

            async with Client(
                self.daemon.mcp_url,
                mode="legacy",
                elicitation_callback=elicit,
                message_handler=on_message,
                cache=None,
            ) as client:
                self.assertEqual(client.protocol_version, "2025-11-25")
                with self.assertRaises(MCPError) as raised:
                    await client.call_tool("mcpx_call", CALL)
                error = raised.exception
                self.assertEqual(error.code, -32042, error.message)
                (elicitation,) = error.data["elicitations"]
                self.assertEqual(elicitation["mode"], "url")
                self.assertIn("remote", elicitation["message"])
                url = elicitation["url"]
                self.check_url(url)
                # A second call before the user has finished is offered the same URL.
                with self.assertRaises(MCPError) as again:
                    await client.call_tool("mcpx_call", CALL)
                self.assertEqual(again.exception.data["elicitations"], [elicitation])
                redirect = parse_qs(urlsplit(url).query)["redirect_uri"][0]
                forged = redirect + "?" + urlencode({"code": "x", "state": "forged"})
                code, page = await anyio.to_thread.run_sync(browse, forged)
                self.assertEqual((code, "used or expired" in page), (400, True), page)
                code, page = await anyio.to_thread.run_sync(browse, url)
                self.assertEqual(code, 200, page)
                self.assertIn("Signed in to remote", page)
                with anyio.fail_after(20):
                    await completed.wait()
                self.assertEqual(heard, [elicitation["elicitationId"]])
                return wire(await client.call_tool("mcpx_call", CALL))

        result = await in_thread(conversation)
        self.assertFalse(result.get("isError", False), result)
        self.assertIn("echoed", texts(result))
        # Every request the server let in carried the user's token.
        self.assertEqual(set(self.tokens_seen()), {b"Bearer " + USER_TOKEN.encode()})
        self.assertEqual(self.issuer.tokens_issued, 1)
        # The forged redirect consumed nothing: one authorization, one exchange.
        self.assertEqual(len(self.issuer.authorized), 1)
        self.assertEqual(asked, [])
        status = await self.daemon.mcpx("auth", "status", "--json")
        self.assertIn('"signed_in"', status.out)
        self.assertNotIn(USER_TOKEN, status.out + self.daemon.log())

    async def test_modern_host_signs_in(self) -> None:
        """
        A 2026-07-28 host: the call is answered input_required with the URL; its retry
        before the user has finished is asked the same URL again, and once the browser
        has been, the retry succeeds.
        """
        await self.daemon.start()
        urls: list[str] = []
        pages: list[tuple[int, str]] = []

        async def elicit(
            context: ClientRequestContext, params: types.ElicitRequestParams
        ) -> types.ElicitResult:
            shown = wire(params)
            self.assertEqual(shown["mode"], "url")
            urls.append(shown["url"])
            if len(urls) > 1:
                # The user signs in the second time round only.
                pages.append(await anyio.to_thread.run_sync(browse, shown["url"]))
            return types.ElicitResult(action="accept")

        async def conversation() -> tuple[str, dict[str, Any]]:
            async with Client(
                self.daemon.mcp_url, mode=MODERN, elicitation_callback=elicit, cache=None
            ) as client:
                result = wire(await client.call_tool("mcpx_call", CALL))
                return client.protocol_version, result

        version, result = await in_thread(conversation)
        self.assertEqual(version, MODERN)
        self.assertFalse(result.get("isError", False), result)
        self.assertIn("echoed", texts(result))
        self.assertEqual(len(urls), 2, urls)
        self.assertEqual(urls[0], urls[1])
        self.check_url(urls[0])
        self.assertEqual(pages[0][0], 200, pages)
        # Every request the server let in carried the user's token.
        self.assertEqual(set(self.tokens_seen()), {b"Bearer " + USER_TOKEN.encode()})

    async def test_ts_modern_host_signs_in(self) -> None:
        """
        The TypeScript SDK v2 client at 2026-07-28, declaring URL elicitation: it is
        asked the URL inside input_required, opens it (the browser's redirect reaches
        the daemon), accepts, and the SDK's retry succeeds.
        """
        await self.daemon.start()
        argv = [str(TS_HOST), "--era", MODERN, "--url", self.daemon.mcp_url]
        argv += ["--server", "remote", "--tool", "echo"]
        out, err, code = await getProcessOutputAndValue(
            node22(), argv, env=self.daemon.env, path=str(TS_HOST.parent), reactor=reactor
        )
        self.assertEqual(code, 0, err)
        seen = json.loads(out.decode().strip().splitlines()[-1])
        self.assertEqual(seen["protocolVersion"], MODERN, seen)
        self.assertNotIn("error", seen, seen)
        self.assertIn("echoed", texts(seen["result"]))
        (asked,) = seen["asked"]
        self.assertEqual(asked["mode"], "url")
        self.check_url(asked["url"])
        self.assertEqual(seen["pages"][0]["status"], 200)
        self.assertIn("Signed in to remote", seen["pages"][0]["text"])
        self.assertEqual(set(self.tokens_seen()), {b"Bearer " + USER_TOKEN.encode()})

    async def test_host_without_url_elicitation(self) -> None:
        """A host that declared no URL elicitation gets the error naming mcpx auth login."""
        await self.daemon.start()

        async def conversation() -> dict[str, Any]:
            async with Client(self.daemon.mcp_url, mode="legacy", cache=None) as client:
                return wire(await client.call_tool("mcpx_call", CALL))

        result = await in_thread(conversation)
        self.assertTrue(result.get("isError"), result)
        self.assertIn("mcpx auth login remote", texts(result))
        self.assertEqual(self.issuer.authorized, [])
