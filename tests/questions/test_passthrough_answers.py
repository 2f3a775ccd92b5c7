"""
A host's answer to a pass-through server's elicitation reaches the server as the host
gave it, as it would directly (issue 43, items 7 and 10): server-everything's
C{trigger-elicitation-request} through C{mcpx serve --passthrough everything}, the
Python SDK's client as the host, on both eras.

  - content mcpx's form check would refuse ("Ada" in a field declared C{email}) is
    the server's to judge: it goes upstream, and the host gets the server's result;
  - a host's JSON-RPC error reply goes upstream as the error of the server's request,
    and the host gets the server's own C{isError} result.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import anyio
import mcp_types as types
from attrs import define, field
from mcp import Client
from mcp.client.context import ClientRequestContext
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.questions.support import (
    CONVERSATION_TIMEOUT,
    Daemon,
    everything_server,
    in_thread,
    modern_demo_server,
)
from tests.support.processes import REPO

TOOL = "trigger-elicitation-request"

#: A server that asks whatever its client declared (C{tests/fixtures/asking_upstream.py}).
ASKING: dict[str, Any] = {
    "command": sys.executable,
    "args": [str(REPO / "tests" / "fixtures" / "asking_upstream.py")],
}


@define
class Answerer:
    """Answers every elicitation as told: a form's content, or an error."""

    content: dict[str, Any] | None = None
    error: types.ErrorData | None = None
    asked: list[dict[str, Any]] = field(factory=list)

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        self.asked.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        if self.error is not None:
            return self.error
        return types.ElicitResult(action="accept", content=self.content)


def _text(result: types.CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def call_tool(
    daemon: Daemon,
    mode: str,
    answerer: Answerer | None,
    path: str = "serve",
    *,
    server: str = "everything",
    calls: tuple[tuple[str, dict[str, Any]], ...] = ((TOOL, {}),),
) -> types.CallToolResult:
    """
    Call the tools C{calls} as a host on C{path} (C{serve} or C{mcp}) in C{mode}, one
    after the other in one session; the last one's result.
    """

    async def conversation() -> types.CallToolResult:
        target: Any = daemon.mcp_url
        if path == "serve":
            target = daemon.serve(server)
        async with Client(
            target,
            mode=mode,
            elicitation_callback=answerer.elicit if answerer is not None else None,
            cache=None,
        ) as client:
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
            return result

    result: types.CallToolResult = await in_thread(conversation)
    return result


class AnswersReachTheServerTests(TestCase):
    timeout = 120

    async def test_unfit_content_goes_to_the_server(self) -> None:
        """
        "Ada" as the email: the server takes it (it does not check formats), and the
        host's call answers with it at once, on both eras; no question is left
        waiting in the broker.
        """
        daemon = await Daemon(
            self, {"everything": everything_server()}, passthrough=["everything"]
        ).start()
        for mode, path in (("legacy", "serve"), ("auto", "serve"), ("legacy", "mcp")):
            answerer = Answerer(content={"name": "Ada Lovelace", "email": "Ada"})
            result = await call_tool(daemon, mode, answerer, path)
            self.assertFalse(result.is_error, (mode, path, result))
            self.assertIn('"email": "Ada"', _text(result), (mode, path))
            self.assertEqual(len(answerer.asked), 1, (mode, path))
        self.assertEqual((await daemon.api("/v1/questions"))["questions"], [])
        self.assertIn("does not fit", daemon.log())

    async def test_host_error_goes_to_the_server(self) -> None:
        """
        A host that answers the elicitation with a JSON-RPC error: the server's request
        fails with that error, and the host gets the server's own isError result naming
        it (as directly), not a -32603.
        """
        daemon = await Daemon(
            self, {"everything": everything_server()}, passthrough=["everything"]
        ).start()
        # Legacy hosts: a 2026-07-28 host has no error to give (its SDK raises instead).
        for path in ("serve", "mcp"):
            error = types.ErrorData(code=-1, message="the user closed the form")
            result = await call_tool(daemon, "legacy", Answerer(error=error), path)
            self.assertTrue(result.is_error, (path, result))
            self.assertIn("the user closed the form", _text(result), path)


class UnwatchedTests(TestCase):
    """
    A host that declared no elicitation is not kept waiting on a broker nobody watches
    (issue 43, item 8): the server's request is refused at once, as such a host refuses
    it directly, and the server answers the call itself.

    The server is one that asks whatever its client declared (C{asking_upstream}):
    server-everything offers its asking tools only to a client that declared the
    capability, and through mcpx such a host is declared nothing more upstream, so it
    is not offered them (L{tests.questions.test_declared_tools}).
    """

    timeout = 120

    async def test_refused_at_once(self) -> None:
        """
        With nobody watching mcpx's questions, the server's elicitation for a host
        without the capability is refused at once with mcpx's error naming the setting,
        and the host gets the server's answer; nothing waits in the broker.
        """
        daemon = await Daemon(self, {"asking": ASKING}, passthrough=["asking"]).start()
        for mode, path in (("legacy", "serve"), ("legacy", "mcp")):
            result = await call_tool(
                daemon,
                mode,
                None,
                path,
                server="asking",
                calls=(("ask", {"label": path}), ("stats", {})),
            )
            answers = json.loads(_text(result))["answers"]
            self.assertIn("proto.brokerWhenUnwatched", json.dumps(answers[path]), path)
        # Nothing was kept for anyone to answer: the elicitations were refused, and the
        # only questions recorded are the roots mcpx answered itself.
        kept = (await daemon.api("/v1/questions?all=true"))["questions"]
        self.assertEqual([q for q in kept if q["method"] != "roots/list"], [])
        self.assertEqual({q["answered_by"] for q in kept}, {"mcpx"} if kept else set())

    async def test_wait_keeps_it_for_the_broker(self) -> None:
        """
        With proto.brokerWhenUnwatched: wait the question waits in the broker, where an
        answer given there reaches the server and ends the host's call.
        """
        daemon = await Daemon(
            self,
            {"asking": ASKING},
            passthrough=["asking"],
            settings={"MCPX_PROTO_BROKER_WHEN_UNWATCHED": "wait"},
        ).start()
        calling = Deferred.fromCoroutine(
            call_tool(daemon, "legacy", None, server="asking", calls=(("ask", {"label": "L"}),))
        )
        question = await daemon.wait_for_question("asking")
        done = await daemon.mcpx("elicit", question["id"], "--answer", '{"name": "Ada Lovelace"}')
        self.assertEqual(done.code, 0, done)
        result = await calling
        self.assertFalse(result.is_error, result)
        self.assertIn("Ada Lovelace", _text(result))


class HostErrorToAModernServerTests(TestCase):
    """
    A legacy host's error reply to a question of a 2026-07-28 upstream (the demo, held
    to the modern era by its entry's C{protocol}, so not met in the host's era), whose
    input requests take results only: the server hears the elicitation was dismissed
    (C{cancel}) and answers the call itself, rather than the call failing with -32603
    (issue 43, item 10).
    """

    timeout = 120

    async def test_dismissed(self) -> None:
        daemon = await Daemon(self, {"demo": modern_demo_server()}, passthrough=["demo"]).start()
        error = types.ErrorData(code=-1, message="the user closed the form")
        answerer = Answerer(error=error)

        async def conversation() -> types.CallToolResult:
            target = daemon.serve("demo")
            async with Client(
                target, mode="legacy", elicitation_callback=answerer.elicit, cache=None
            ) as client:
                return await client.call_tool("ask", {"question": "Which colour?"})

        result: types.CallToolResult = await in_thread(conversation)
        self.assertEqual(len(answerer.asked), 1)
        # The demo's own words: in the legacy era (were it met so) "the client
        # refused: ...", in the modern one that the question was dismissed.
        self.assertRegex(_text(result), "dismissed the question|the client refused", result)


class OverlappingHostsTests(TestCase):
    """
    Two hosts that declare elicitation share the pass-through instance of a shared
    server that asks (the "Sometimes" rows of spec/host-matrix.md): one host's call is
    still in flight, its question open, when the other calls.  The server has asked
    once, so mcpx knows it asks: the second call runs on an instance of its own and its
    question reaches its own host, rather than arriving where two calls are in flight,
    tied to neither and, with nobody watching the broker, refused at once.
    """

    timeout = 120

    async def test_second_host_is_asked(self) -> None:
        """Through C{/mcp} and through C{serve}, each on a daemon of its own."""
        for path in ("mcp", "serve"):
            daemon = await Daemon(self, {"asking": ASKING}, passthrough=["asking"]).start()
            first, second = await self.overlapping(daemon, path)
            self.assertEqual(second, f'second-{path}: accept {{"name": "Second"}}', path)
            self.assertEqual(first, f'first-{path}: accept {{"name": "First"}}', path)

    async def overlapping(self, daemon: Daemon, path: str) -> tuple[str, str]:
        """
        The first host calls C{ask} and holds its question open until the second
        host's call of C{ask} on C{path} ended; what each call answered.
        """
        first_asked, second_done = threading.Event(), threading.Event()

        async def first_elicits(
            context: ClientRequestContext, params: types.ElicitRequestParams
        ) -> types.ElicitResult:
            first_asked.set()
            await anyio.to_thread.run_sync(second_done.wait, CONVERSATION_TIMEOUT)
            return types.ElicitResult(action="accept", content={"name": "First"})

        async def first_host() -> types.CallToolResult:
            target: Any = daemon.mcp_url if path == "mcp" else daemon.serve("asking")
            async with Client(
                target, mode="legacy", elicitation_callback=first_elicits, cache=None
            ) as client:
                return await client.call_tool("ask", {"label": f"first-{path}"})

        first = in_thread(first_host)
        self.assertTrue(await deferToThread(first_asked.wait, CONVERSATION_TIMEOUT), path)
        try:
            second = await call_tool(
                daemon,
                "legacy",
                Answerer(content={"name": "Second"}),
                path,
                server="asking",
                calls=(("ask", {"label": f"second-{path}"}),),
            )
        finally:
            second_done.set()
        return _text(await first), _text(second)
