"""
The policy end to end: real daemons, a real upstream whose tools write (the SDK notes
fixture, which records every call it really runs) and the MCP Python SDK as the host.

A call that needs confirmation is asked of a 2025-11-25 host natively (over C{mcpx serve}
and over C{/mcp}), of a 2026-07-28 host with C{input_required}, and through the broker
(C{mcpx elicit}) for a host that declared nothing; what the user declines never reaches
the upstream.  A result that breaks its tool's C{outputSchema} is withheld or passed
on and logged, as C{validate.output} says.  Sampling is denied, confirmed and capped on
its way to a host that answers it, and its C{includeContext} refused unless
C{sampling.includeContext} allows it; a reload that hides a tool tells a connected host
its list changed.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.context import ClientRequestContext
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.fixtures import notes_server
from tests.questions.support import MODERN, Daemon, in_thread
from tests.questions.test_end_to_end import texts, wire
from tests.support.processes import reactor


def notes(record: Path, **policy: Any) -> dict[str, Any]:
    """The notes fixture as a server entry, recording into C{record}, with C{policy}."""
    return {
        "command": sys.executable,
        "args": [notes_server.__file__, "--record", str(record)],
        **policy,
    }


class Notes:
    """The calls the notes fixture of one test really ran."""

    def __init__(self, test: TestCase) -> None:
        folder = tempfile.mkdtemp(prefix="mcpx-notes-")
        self.path = Path(folder) / "calls.jsonl"
        test.addCleanup(shutil.rmtree, folder, True)

    def seen(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines]


class Confirmer:
    """A host's user: answers each confirmation with the next of C{answers}."""

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(wire(params))
        return types.ElicitResult(action="accept", content={"confirm": self.answers.pop(0)})


def declined(result: Mapping[str, Any]) -> bool:
    """Whether a tool result is mcpx's refusal of a declined confirmation."""
    return result.get("isError") is True and "did not call tool" in texts(result)


class ConfirmationTests(TestCase):
    """A call that needs confirmation waits for the user; a declined one never runs."""

    timeout = 90

    def setUp(self) -> None:
        self.notes = Notes(self)
        entry = notes(self.notes.path, confirmDestructive=True, tools={"confirm": ["rename_*"]})
        self.servers = {"notes": entry}

    def check_asked(self, asked: dict[str, Any], tool: str, why: str) -> None:
        """The question shows the tool, the server, the arguments and which setting asks."""
        message = asked["message"]
        self.assertIn(f"tool {tool!r} of server 'notes'", message)
        self.assertIn(why, message)
        self.assertIn('"name": "shopping"', message)
        self.assertEqual(asked["requestedSchema"]["required"], ["confirm"])

    async def test_legacy_stdio_host(self) -> None:
        """
        Over C{mcpx serve --passthrough notes}, a 2025-11-25 host is asked before the
        destructive C{delete_note} runs (it says yes: the server runs it), and before
        C{rename_note}, which C{tools.confirm} names (it says no: the server never sees
        the call, and the host gets a tool error saying so).  C{list_notes} asks nothing.
        """
        daemon = await Daemon(self, self.servers).start()
        user = Confirmer(True, False)

        async def conversation() -> tuple[str, list[dict[str, Any]]]:
            target = daemon.serve("notes")
            async with Client(
                target, mode="legacy", elicitation_callback=user.elicit, cache=None
            ) as client:
                results = [
                    await client.call_tool("delete_note", {"name": "shopping"}),
                    await client.call_tool("rename_note", {"name": "shopping", "to": "food"}),
                    await client.call_tool("list_notes", {}),
                ]
                return client.protocol_version, [wire(result) for result in results]

        version, (deleted, renamed, listed) = await in_thread(conversation)
        self.assertEqual(version, "2025-11-25")
        self.assertEqual(texts(deleted), "deleted shopping")
        self.assertTrue(declined(renamed), renamed)
        self.assertIn("the server never saw the call", texts(renamed))
        self.assertEqual(texts(listed), "shopping, ideas")
        self.assertEqual(len(user.asked), 2, user.asked)
        self.check_asked(user.asked[0], "delete_note", "confirmDestructive")
        self.check_asked(user.asked[1], "rename_note", "tools.confirm pattern 'rename_*'")
        self.assertEqual(
            self.notes.seen(), [{"tool": "delete_note", "arguments": {"name": "shopping"}}]
        )

    async def test_legacy_http_host(self) -> None:
        """
        A 2025-11-25 host on C{/mcp} calling through C{mcpx_call} is asked on its own
        session: a no keeps the call from the server, a yes lets it run.
        """
        daemon = await Daemon(self, self.servers).start()
        user = Confirmer(False, True)

        async def conversation() -> list[dict[str, Any]]:
            async with Client(
                daemon.mcp_url, mode="legacy", elicitation_callback=user.elicit, cache=None
            ) as client:
                call = {"server": "notes", "tool": "delete_note", "arguments": {"name": "shopping"}}
                return [
                    wire(await client.call_tool("mcpx_call", call)),
                    wire(await client.call_tool("mcpx_call", call)),
                ]

        refused, ran = await in_thread(conversation)
        self.assertTrue(declined(refused), refused)
        self.assertFalse(ran.get("isError", False), ran)
        self.assertIn("deleted shopping", texts(ran))
        self.assertEqual(len(user.asked), 2)
        self.check_asked(user.asked[0], "delete_note", "confirmDestructive")
        self.assertEqual(
            self.notes.seen(), [{"tool": "delete_note", "arguments": {"name": "shopping"}}]
        )

    async def test_modern_host_input_required(self) -> None:
        """
        A 2026-07-28 host gets the confirmation as an C{input_required} result (the SDK
        answers it through its elicitation callback and retries): a yes runs the call,
        a no leaves the server untouched.
        """
        daemon = await Daemon(self, self.servers, passthrough=["notes"]).start()
        user = Confirmer(True, False)

        async def conversation() -> tuple[str, list[dict[str, Any]]]:
            async with Client(
                daemon.mcp_url, mode=MODERN, elicitation_callback=user.elicit, cache=None
            ) as client:
                results = [
                    await client.call_tool("delete_note", {"name": "shopping"}),
                    await client.call_tool("rename_note", {"name": "shopping", "to": "food"}),
                ]
                return client.protocol_version, [wire(result) for result in results]

        version, (deleted, renamed) = await in_thread(conversation)
        self.assertEqual(version, MODERN)
        self.assertEqual(texts(deleted), "deleted shopping")
        self.assertTrue(declined(renamed), renamed)
        self.assertEqual(len(user.asked), 2, user.asked)
        self.check_asked(user.asked[0], "delete_note", "confirmDestructive")
        self.assertEqual(
            self.notes.seen(), [{"tool": "delete_note", "arguments": {"name": "shopping"}}]
        )

    async def test_unanswered_in_time_is_declined(self) -> None:
        """
        With C{proto.askTimeout} at 1s, a 2025-11-25 host whose user takes longer than
        that to answer gets mcpx's refusal, and the server never sees the call, even
        though the user's late answer is yes.
        """
        daemon = await Daemon(self, self.servers, settings={"MCPX_PROTO_ASK_TIMEOUT": "1s"}).start()
        late: list[dict[str, Any]] = []

        async def slow_yes(
            context: ClientRequestContext, params: types.ElicitRequestParams
        ) -> types.ElicitResult:
            late.append(wire(params))
            await anyio.sleep(3)
            return types.ElicitResult(action="accept", content={"confirm": True})

        async def conversation() -> dict[str, Any]:
            async with Client(
                daemon.mcp_url, mode="legacy", elicitation_callback=slow_yes, cache=None
            ) as client:
                call = {"server": "notes", "tool": "delete_note", "arguments": {"name": "shopping"}}
                result = wire(await client.call_tool("mcpx_call", call))
                # Stay connected until the late yes has gone to mcpx.
                await anyio.sleep(3)
                return result

        refused = await in_thread(conversation)
        self.assertTrue(declined(refused), refused)
        self.assertEqual(len(late), 1)
        self.assertEqual(self.notes.seen(), [], "a confirmation given too late ran the call")

    async def test_broker_for_a_host_that_declared_nothing(self) -> None:
        """
        A host that declared nothing cannot be asked: the confirmation waits in the
        broker, where C{mcpx elicit --json} lists it and answers it.  The call answered
        no never reaches the server; the one answered yes does.
        """
        daemon = await Daemon(self, self.servers).start()

        async def call() -> dict[str, Any]:
            async with Client(daemon.mcp_url, mode="legacy", cache=None) as client:
                return wire(
                    await client.call_tool(
                        "mcpx_call",
                        {
                            "server": "notes",
                            "tool": "delete_note",
                            "arguments": {"name": "shopping"},
                        },
                    )
                )

        results = []
        for answer in (False, True):
            calling = in_thread(call)
            pending = await daemon.wait_for_question("notes")
            listed = await daemon.mcpx("elicit", "--json")
            self.assertEqual(listed.code, 0, listed)
            [question] = listed.json()["questions"]
            self.assertEqual((question["id"], question["route"]), (pending["id"], "broker"))
            self.check_asked(question["params"], "delete_note", "confirmDestructive")
            self.assertEqual(self.notes.seen(), [], "the server ran a call nobody confirmed")
            done = await daemon.mcpx(
                "elicit", question["id"], "--answer", json.dumps({"confirm": answer})
            )
            self.assertEqual(done.code, 0, done)
            results.append(await calling)
        refused, ran = results
        self.assertTrue(declined(refused), refused)
        self.assertIn("deleted shopping", texts(ran))
        self.assertEqual(
            self.notes.seen(), [{"tool": "delete_note", "arguments": {"name": "shopping"}}]
        )

    async def test_unanswered_in_the_broker_expires(self) -> None:
        """
        With C{proto.brokerTimeout} at 1s, a confirmation nobody answers expires in the
        broker: C{mcpx call} ends soon after with the tool error saying the server never
        saw the call (exit status 1), the question is listed as expired, a yes sent
        after it is refused, and the server never runs the call.
        """
        daemon = await Daemon(
            self, self.servers, settings={"MCPX_PROTO_BROKER_TIMEOUT": "1s"}
        ).start()
        began = reactor.seconds()
        called = await daemon.mcpx("call", "notes", "delete_note", "name=shopping")
        waited = reactor.seconds() - began
        self.assertEqual(called.code, 1, called)
        self.assertIn("it needs confirmation (confirmDestructive", called.err)
        self.assertIn("the server never saw the call", called.err)
        # Far below the 120s the broker waits unless told: the setting was applied.
        self.assertLess(waited, 20.0, called)
        expired = await daemon.wait_for_question("notes", state="expired")
        late = await daemon.mcpx("elicit", expired["id"], "--answer", '{"confirm": true}')
        self.assertNotEqual(late.code, 0, late)
        self.assertIn("expired", late.err, late)
        await deferLater(reactor, 0.5, lambda: None)
        self.assertEqual(self.notes.seen(), [], "an expired confirmation ran the call")

    async def test_mcpx_call_waits_for_mcpx_elicit(self) -> None:
        """
        C{mcpx call} of the destructive tool waits while the confirmation sits in the
        broker; answered no through C{mcpx elicit}, it ends in the tool error saying
        the server never saw the call (exit status 1), and the server indeed did not.
        """
        daemon = await Daemon(self, self.servers).start()
        calling = Deferred.fromCoroutine(
            daemon.mcpx("call", "notes", "delete_note", "name=shopping")
        )
        pending = await daemon.wait_for_question("notes")
        self.assertIn("tool 'delete_note' of server 'notes'", pending["params"]["message"])
        done = await daemon.mcpx("elicit", pending["id"], "--answer", '{"confirm": false}')
        self.assertEqual(done.code, 0, done)
        called = await calling
        self.assertEqual(called.code, 1, called)
        self.assertIn("the server never saw the call", called.out + called.err)
        self.assertEqual(self.notes.seen(), [])


class Host:
    """A host that answers sampling (and confirmations, yes), recording what it saw."""

    def __init__(self, *confirmations: bool) -> None:
        self.user = Confirmer(*confirmations)
        self.sampled: list[dict[str, Any]] = []

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.sampled.append(wire(params))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="short summary"),
            model="e2e-model",
        )


#: A host's sampling capability that takes C{includeContext} other than C{none}.
WITH_CONTEXT = types.SamplingCapability(context=types.SamplingContextCapability())


class SamplingTests(TestCase):
    """The notes server's sampling through its policy, to a 2025-11-25 host."""

    timeout = 90

    async def summarise(
        self,
        daemon: Daemon,
        host: Host,
        mode: str = "legacy",
        tool: str = "summarise",
        sampling: types.SamplingCapability | None = None,
    ) -> dict[str, Any]:
        async def conversation() -> dict[str, Any]:
            async with Client(
                daemon.mcp_url,
                mode=mode,
                sampling_callback=host.sample,
                sampling_capabilities=sampling,
                elicitation_callback=host.user.elicit,
                cache=None,
            ) as client:
                return wire(
                    await client.call_tool(
                        "mcpx_call",
                        {"server": "notes", "tool": tool, "arguments": {"text": "a b c"}},
                    )
                )

        try:
            result: dict[str, Any] = await in_thread(conversation)
        except TimeoutError:
            self.fail(f"the call did not end; daemon log:\n{daemon.log()[-6000:]}")
        return result

    async def test_denied_never_reaches_the_host(self) -> None:
        """C{sampling.mode} deny: the host is not asked and the server's tool fails."""
        record = Notes(self)
        daemon = await Daemon(
            self, {"notes": notes(record.path, sampling={"mode": "deny"})}
        ).start()
        host = Host()
        result = await self.summarise(daemon, host)
        self.assertTrue(result.get("isError"), result)
        self.assertIn("sampling.mode is deny", texts(result))
        self.assertEqual(host.sampled, [])
        self.assertEqual(record.seen(), [])

    async def test_confirmed_and_capped(self) -> None:
        """
        C{sampling.mode} confirm with C{maxTokens} 16: mcpx asks the user first (naming
        the server and the prompt); once they say yes the host is asked for at most 16
        tokens instead of the 64 the server wanted, and its reply reaches the server.
        A no ends the request before the host sees it.
        """
        record = Notes(self)
        daemon = await Daemon(
            self,
            {"notes": notes(record.path, sampling={"mode": "confirm", "maxTokens": 16})},
        ).start()
        host = Host(True, False)
        ran = await self.summarise(daemon, host)
        self.assertFalse(ran.get("isError", False), ran)
        self.assertIn("short summary (e2e-model)", texts(ran))
        [sampled] = host.sampled
        self.assertEqual(sampled["maxTokens"], 16)
        self.assertEqual(sampled["messages"][0]["content"]["text"], "Summarise: a b c")
        [asked] = host.user.asked
        self.assertIn("server 'notes' asks the model for up to 16 tokens", asked["message"])
        self.assertIn("Summarise: a b c", asked["message"])

        refused = await self.summarise(daemon, host)
        self.assertTrue(refused.get("isError"), refused)
        self.assertEqual(len(host.sampled), 1, "the declined request reached the host")
        self.assertEqual(record.seen(), [{"tool": "summarise", "arguments": {"text": "a b c"}}])

    async def test_modern_host_confirms_and_is_capped(self) -> None:
        """
        A 2026-07-28 host gets mcpx's sampling confirmation and then the capped
        sampling request as C{input_required} rounds (the SDK answers both through its
        callbacks); the server gets the host's reply.
        """
        record = Notes(self)
        daemon = await Daemon(
            self,
            {"notes": notes(record.path, sampling={"mode": "confirm", "maxTokens": 16})},
        ).start()
        host = Host(True)
        ran = await self.summarise(daemon, host, MODERN)
        self.assertFalse(ran.get("isError", False), ran)
        self.assertIn("short summary (e2e-model)", texts(ran))
        [asked] = host.user.asked
        self.assertIn("server 'notes' asks the model for up to 16 tokens", asked["message"])
        [sampled] = host.sampled
        self.assertEqual(sampled["maxTokens"], 16)
        self.assertEqual(record.seen(), [{"tool": "summarise", "arguments": {"text": "a b c"}}])

    async def test_include_context_refused(self) -> None:
        """
        A server asking the host's model with C{includeContext} C{thisServer} is refused
        by default (C{sampling.includeContext} false), even though the host declared
        C{sampling.context}: the host is never asked, the server's tool fails with
        mcpx's reason naming the setting, and its body never runs.
        """
        record = Notes(self)
        daemon = await Daemon(self, {"notes": notes(record.path)}).start()
        host = Host()
        refused = await self.summarise(
            daemon, host, tool="summarise_in_context", sampling=WITH_CONTEXT
        )
        self.assertTrue(refused.get("isError"), refused)
        self.assertIn("mcpx refuses includeContext 'thisServer' for server 'notes'", texts(refused))
        self.assertIn("sampling.includeContext", texts(refused))
        self.assertEqual(host.sampled, [])
        self.assertEqual(record.seen(), [])

    async def test_include_context_allowed(self) -> None:
        """
        With C{sampling.includeContext} true the same request reaches a host that
        declared C{sampling.context} as the server made it (C{includeContext}
        C{thisServer}), and its reply the server.
        """
        record = Notes(self)
        daemon = await Daemon(
            self, {"notes": notes(record.path, sampling={"includeContext": True})}
        ).start()
        host = Host()
        ran = await self.summarise(daemon, host, tool="summarise_in_context", sampling=WITH_CONTEXT)
        self.assertFalse(ran.get("isError", False), ran)
        self.assertIn("short summary (e2e-model)", texts(ran))
        [sampled] = host.sampled
        self.assertEqual(sampled["includeContext"], "thisServer")
        self.assertEqual(
            record.seen(), [{"tool": "summarise_in_context", "arguments": {"text": "a b c"}}]
        )


#: What mcpx says of C{count_notes}'s answer, whose count breaks its outputSchema.
OUTPUT_PROBLEM = "does not fit its outputSchema: /count: 5 is greater than the maximum of 2"


class OutputSchemaTests(TestCase):
    """
    The notes fixture's C{count_notes} answers C{{"count": 5}} where its C{outputSchema}
    allows at most 2; it runs at the server either way (it is recorded).
    """

    timeout = 90

    async def test_enforce_withholds(self) -> None:
        """
        With C{validate.output} enforce the result is withheld: a 2025-11-25 and a
        2026-07-28 host calling the tool directly over C{mcpx serve} get a tool error
        (C{/v1}'s C{invalid_output} and message, for the model to read, not C{-32603})
        saying what is wrong and that the result was withheld, and a host calling
        through the gateway's C{mcpx_call} a tool error saying the same; none of them
        gets the count.
        """
        record = Notes(self)
        daemon = await Daemon(
            self, {"notes": notes(record.path, validate={"output": "enforce"})}
        ).start()

        async def conversation() -> tuple[list[dict[str, Any]], dict[str, Any]]:
            direct = []
            for mode in ("legacy", MODERN):
                async with Client(daemon.serve("notes"), mode=mode, cache=None) as client:
                    direct.append(wire(await client.call_tool("count_notes", {})))
            async with Client(daemon.mcp_url, mode="legacy", cache=None) as client:
                call = {"server": "notes", "tool": "count_notes", "arguments": {}}
                gateway = wire(await client.call_tool("mcpx_call", call))
            return direct, gateway

        direct, gateway = await in_thread(conversation)
        for result in direct:
            self.assertTrue(result.get("isError"), result)
            self.assertNotIn("structuredContent", result)
            self.assertTrue(texts(result).startswith("invalid_output: "), result)
            self.assertIn(OUTPUT_PROBLEM, texts(result))
            self.assertIn("the result was withheld (validate.output is enforce)", texts(result))
        self.assertTrue(gateway.get("isError"), gateway)
        self.assertIn(OUTPUT_PROBLEM, texts(gateway))
        self.assertNotIn("structuredContent", gateway)
        self.assertEqual(len(record.seen()), 3)

    async def test_warn_passes_it_on_and_logs_once(self) -> None:
        """
        By default (C{validate.output} warn) the result is passed on as the server sent
        it: through C{mcpx_call} the host gets C{{"count": 5}} each time, and a host
        calling the tool directly gets it too (the Python SDK's own check of the schema
        then refuses it).  The daemon logs the problem once for the tool, not per call.
        """
        record = Notes(self)
        daemon = await Daemon(self, {"notes": notes(record.path)}).start()

        async def conversation() -> tuple[list[dict[str, Any]], str]:
            async with Client(daemon.mcp_url, mode="legacy", cache=None) as client:
                call = {"server": "notes", "tool": "count_notes", "arguments": {}}
                passed = [wire(await client.call_tool("mcpx_call", call)) for _ in range(2)]
            async with Client(daemon.serve("notes"), mode="legacy", cache=None) as client:
                try:
                    await client.call_tool("count_notes", {})
                except Exception as e:
                    return passed, str(e)
            return passed, "the host took the result"

        passed, direct = await in_thread(conversation)
        for result in passed:
            self.assertFalse(result.get("isError", False), result)
            self.assertEqual(result["structuredContent"], {"count": 5})
        self.assertIn("Invalid structured content returned by tool count_notes", direct)
        warned = [line for line in daemon.log_lines("warn") if "outputSchema" in line]
        self.assertEqual(len(warned), 1, warned)
        self.assertIn("tool 'count_notes' of server 'notes'", warned[0])
        self.assertIn("passed on; logged once per tool", warned[0])
        self.assertEqual(len(record.seen()), 3)


class ReloadTests(TestCase):
    """A policy changed by a reload is announced to connected hosts."""

    timeout = 90

    async def test_deny_added_by_reload_tells_the_host(self) -> None:
        """
        A 2025-11-25 host on C{/mcp} (notes passed through) lists C{delete_note}; the
        configuration gains C{tools.deny: ["delete_*"]} and C{mcpx reload} applies it:
        the host hears C{notifications/tools/list_changed}, C{delete_note} is gone from
        its new list, and calling it is refused naming C{tools.deny}.
        """
        record = Notes(self)
        daemon = await Daemon(self, {"notes": notes(record.path)}, passthrough=["notes"]).start()
        config = Path(daemon.env["MCPX_CONFIG"])
        heard: list[str] = []

        async def on_message(message: Any) -> None:
            root = getattr(message, "root", message)
            method = getattr(root, "method", None)
            if isinstance(method, str):
                heard.append(method)

        reloaded = Signal()

        async def conversation() -> tuple[list[str], list[str], dict[str, Any] | str]:
            import anyio

            async with Client(
                daemon.mcp_url, mode="legacy", message_handler=on_message, cache=None
            ) as client:
                before = [tool.name for tool in (await client.list_tools()).tools]
                reloaded.start()
                with anyio.move_on_after(20):
                    while "notifications/tools/list_changed" not in heard:
                        await anyio.sleep(0.05)
                after = [tool.name for tool in (await client.list_tools()).tools]
                try:
                    refused: dict[str, Any] | str = wire(
                        await client.call_tool("delete_note", {"name": "shopping"})
                    )
                except Exception as e:
                    refused = str(e)
                return before, after, refused

        talking = in_thread(conversation)
        await reloaded.wait()
        config.write_text(
            json.dumps({"servers": {"notes": notes(record.path, tools={"deny": ["delete_*"]})}}),
            encoding="utf-8",
        )
        done = await daemon.mcpx("reload")
        self.assertEqual(done.code, 0, done)
        before, after, refused = await talking
        self.assertIn("notifications/tools/list_changed", heard, daemon.log()[-3000:])
        self.assertIn("delete_note", before)
        self.assertNotIn("delete_note", after)
        self.assertIn("list_notes", after)
        self.assertIn("tools.deny", json.dumps(refused))
        self.assertEqual(record.seen(), [])


class Signal:
    """The SDK thread says "now" (L{start}); the reactor side waits for it (L{wait})."""

    def __init__(self) -> None:
        self._set = False

    def start(self) -> None:
        # Called from the SDK's thread: a plain flag, read by polling on the reactor.
        self._set = True

    async def wait(self, timeout: float = 20.0) -> None:
        deadline = reactor.seconds() + timeout
        while not self._set:
            if reactor.seconds() > deadline:
                raise TimeoutError("the host never got to the reload")
            await deferLater(reactor, 0.05, lambda: None)
