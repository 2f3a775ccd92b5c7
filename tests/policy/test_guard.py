"""
The policy in front of the pool: hidden tools, schema checks in each mode,
confirmations, and reloads that change only a policy.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth.caller import subject_identity
from mcpx.call import Call
from mcpx.policy.errors import InvalidArguments, InvalidOutput, ToolHidden
from mcpx.policy.guard import Confirmation, GuardedPool, said_yes
from mcpx.settings.servers import Scope, ServersConfig, StdioServer
from tests.policy.fakes import InnerPool, configured


def run(coroutine: Any) -> Any:
    return Deferred.fromCoroutine(coroutine)


class ToolPolicyTests(SynchronousTestCase):
    def guarded(self, **entry: object) -> tuple[GuardedPool, InnerPool]:
        inner = InnerPool(configured(notes=entry))
        return GuardedPool(inner), inner

    def test_denied_tool_absent_from_list(self) -> None:
        guard, _ = self.guarded(tools={"deny": ["drop_*"]})
        names = [t["name"] for t in self.successResultOf(run(guard.tools("notes")))]
        self.assertEqual(names, ["add_note", "delete_note", "wipe"])

    def test_denied_tool_uncallable_naming_setting(self) -> None:
        guard, inner = self.guarded(tools={"deny": ["drop_*"]})
        failure = self.failureResultOf(run(guard.call_tool("notes", "drop_all", {})), ToolHidden)
        self.assertIn("tools.deny pattern 'drop_*'", str(failure.value))
        self.assertEqual(inner.calls, [])
        self.assertEqual(failure.value.rpc_error().code, -32602)

    def test_allow_list_hides_others(self) -> None:
        guard, inner = self.guarded(tools={"allow": ["add_*"]})
        names = [t["name"] for t in self.successResultOf(run(guard.tools("notes")))]
        self.assertEqual(names, ["add_note"])
        failure = self.failureResultOf(run(guard.call_tool("notes", "wipe", {})), ToolHidden)
        self.assertIn("tools.allow", str(failure.value))
        self.assertEqual(inner.calls, [])

    def test_denied_tool_absent_from_cached_list(self) -> None:
        """The list the pool has cached, taken without waiting, hides what tools() hides."""
        guard, inner = self.guarded(tools={"deny": ["drop_*"]})
        self.assertIsNone(guard.cached_catalogue("notes", "tools"))
        inner.cached = True
        listed = guard.cached_catalogue("notes", "tools")
        assert listed is not None
        self.assertEqual([t["name"] for t in listed], ["add_note", "delete_note", "wipe"])
        self.assertEqual(inner.lists, 0)

    def test_no_policy_lists_everything(self) -> None:
        guard, _ = self.guarded()
        self.assertEqual(len(self.successResultOf(run(guard.tools("notes")))), 4)


class InputTests(SynchronousTestCase):
    def test_enforced_by_default(self) -> None:
        inner = InnerPool(configured(notes={}))
        guard = GuardedPool(inner)
        failure = self.failureResultOf(
            run(guard.call_tool("notes", "add_note", {"text": 3})), InvalidArguments
        )
        self.assertIn("/text: 3 is not of type 'string'", str(failure.value))
        self.assertEqual(failure.value.status, 400)
        self.assertEqual(failure.value.rpc_error().data["errors"][0]["path"], "/text")
        self.assertEqual(inner.calls, [])
        self.assertEqual(guard.counts["input", "notes"], 1)

    def test_schemas_compiled_where_told(self) -> None:
        """
        A tool's schemas are compiled through compile_in (the daemon's thread pool), once
        per tool list, and the call waits for it: nothing is checked or sent before.
        """
        inner = InnerPool(configured(notes={}))
        compiling: list[Deferred[Any]] = []

        def compile_in(compile: Any) -> Deferred[Any]:
            done: Deferred[Any] = Deferred()
            compiling.append(done)
            done.addCallback(lambda _: compile())
            return done

        guard = GuardedPool(inner, compile_in=compile_in)
        call = run(guard.call_tool("notes", "add_note", {"text": 3}))
        self.assertNoResult(call)
        self.assertEqual((len(compiling), inner.calls), (1, []))
        compiling[0].callback(None)
        self.failureResultOf(call, InvalidArguments)
        self.successResultOf(run(guard.call_tool("notes", "add_note", {"text": "a"})))
        self.assertEqual(len(compiling), 1)
        self.assertEqual(inner.calls, [("add_note", {"text": "a"})])

    def test_valid_arguments_pass(self) -> None:
        inner = InnerPool(configured(notes={}))
        self.successResultOf(run(GuardedPool(inner).call_tool("notes", "add_note", {"text": "a"})))
        self.assertEqual(inner.calls, [("add_note", {"text": "a"})])

    def test_warn_passes_and_counts(self) -> None:
        inner = InnerPool(configured(notes={"validate": {"input": "warn"}}))
        guard = GuardedPool(inner)
        self.successResultOf(run(guard.call_tool("notes", "add_note", {})))
        self.assertEqual(inner.calls, [("add_note", {})])
        self.assertEqual(guard.counts["input", "notes"], 1)

    def test_off_checks_nothing(self) -> None:
        inner = InnerPool(configured(notes={"validate": {"input": "off"}}))
        guard = GuardedPool(inner)
        self.successResultOf(run(guard.call_tool("notes", "add_note", {"x": 1})))
        self.assertEqual(guard.counts["input", "notes"], 0)

    def test_compiled_once_per_list(self) -> None:
        inner = InnerPool(configured(notes={}))
        guard = GuardedPool(inner)
        self.successResultOf(run(guard.call_tool("notes", "add_note", {"text": "a"})))
        index = guard._indexes["notes", ""]
        checks = index.checks["add_note"]
        self.successResultOf(run(guard.call_tool("notes", "add_note", {"text": "b"})))
        self.assertIs(guard._indexes["notes", ""].checks["add_note"], checks)
        # A new list from the server (new tool objects) is compiled anew.
        inner.catalogue = [dict(tool) for tool in inner.catalogue]
        self.successResultOf(run(guard.call_tool("notes", "add_note", {"text": "c"})))
        self.assertIsNot(guard._indexes["notes", ""].checks["add_note"], checks)

    def test_compiled_once_for_every_client_of_a_shared_server(self) -> None:
        """
        Calls from many clients (each 2026-07-28 request is one) to a shared server's tool
        check against one compiled schema; a C{client}-scoped server's are each client's.
        """
        inner = InnerPool(configured(notes={}))
        guard = GuardedPool(inner)
        for n in range(3):
            call = guard.call_tool("notes", "add_note", {"text": "a"}, client=f"http/request-{n}")
            self.successResultOf(run(call))
        self.assertEqual(list(guard._indexes), [("notes", "")])
        shared = configured(notes={})
        notes = StdioServer("notes", "python3", scope=Scope.CLIENT)
        scoped = ServersConfig({"notes": notes}, "test", policies=shared.policies)
        guard = GuardedPool(InnerPool(scoped))
        for client in ("a", "b"):
            call = guard.call_tool("notes", "add_note", {"text": "a"}, client=client)
            self.successResultOf(run(call))
        self.assertEqual(sorted(guard._indexes), [("notes", "a"), ("notes", "b")])


class CachedIndexTests(SynchronousTestCase):
    def test_each_cached_list_checked_by_its_own_schemas(self) -> None:
        """
        Calls decided at once are checked against the schemas of the list the pool has
        cached now: a new list's, then the first one's again when it comes back, and a
        tool the new list does not have goes unchecked.
        """
        inner = InnerPool(configured(notes={}))
        inner.cached = True
        guard = GuardedPool(inner)
        first = inner.catalogue
        strict = [
            {**tool, "inputSchema": {"type": "object", "required": ["title"]}}
            for tool in first
            if tool["name"] == "add_note"
        ]
        for catalogue, refused in ((first, False), (strict, True), (first, False)):
            inner.catalogue = catalogue
            for _ in range(2):
                done = run(guard.call_tool("notes", "add_note", {"text": "a"}))
                if refused:
                    self.failureResultOf(done, InvalidArguments)
                else:
                    self.successResultOf(done)
        self.assertEqual(inner.lists, 0)
        inner.catalogue = [tool for tool in first if tool["name"] != "add_note"]
        self.successResultOf(run(guard.call_tool("notes", "add_note", {"text": 3})))


class CachedListTests(SynchronousTestCase):
    """
    A call whose tool list the pool has cached and whose schemas are compiled is decided
    at once, without a coroutine of the policy's own: it refuses, warns, publishes and
    asks exactly as the first call (which waited for the compilation) did.
    """

    def outcome(self, entry: dict[str, Any], tool: str, arguments: dict[str, Any]) -> Any:
        """What two calls in a row see, the second decided at once: each call's result
        or refusal (class, message, status, data), the events, counts and calls."""
        inner = InnerPool(configured(notes=entry))
        inner.cached = True
        events: list[tuple[str, str | None, dict[str, Any]]] = []
        asked: list[str] = []

        async def confirm(call: Confirmation) -> bool:
            asked.append(call.why)
            return False

        guard = GuardedPool(
            inner,
            confirm=confirm,
            publish=lambda kind, server=None, **data: events.append((kind, server, data)),
        )
        seen = []
        for _ in range(2):
            events.clear()
            done = run(guard.call_tool("notes", tool, arguments, client="http/alice-1"))
            results: list[Any] = []
            done.addBoth(results.append)
            (result,) = results
            if isinstance(result, Failure):
                error: Any = result.value
                shown: Any = (type(error), str(error), error.status, error.rpc_error().data)
            else:
                shown = result
            seen.append((shown, list(events), list(asked), dict(guard.counts), list(inner.calls)))
            asked.clear()
            inner.calls.clear()
            guard.counts.clear()
        self.assertEqual(inner.lists, 0)
        return seen

    def assertSame(self, entry: dict[str, Any], tool: str, arguments: dict[str, Any]) -> Any:
        first, second = self.outcome(entry, tool, arguments)
        self.assertEqual(second, first)
        return first

    def test_invalid_arguments_refused_alike(self) -> None:
        shown, events, _, counts, calls = self.assertSame({}, "add_note", {"text": 3})
        self.assertEqual(shown[0], InvalidArguments)
        self.assertIn("/text: 3 is not of type 'string'", shown[1])
        self.assertEqual((shown[2], shown[3]["errors"][0]["path"]), (400, "/text"))
        self.assertEqual([kind for kind, _, _ in events], ["policy.input_invalid"])
        self.assertEqual((counts, calls), ({("input", "notes"): 1}, []))

    def test_warned_arguments_pass_alike(self) -> None:
        _, events, _, counts, calls = self.assertSame(
            {"validate": {"input": "warn"}}, "add_note", {}
        )
        self.assertEqual(events[0][2]["mode"], "warn")
        self.assertEqual((counts, calls), ({("input", "notes"): 1}, [("add_note", {})]))

    def test_a_subjects_misfit_is_its_own_alike(self) -> None:
        alice = subject_identity("alice")
        inner = InnerPool(configured(notes={"validate": {"input": "warn"}}))
        inner.cached = True
        principals: list[object] = []
        guard = GuardedPool(
            inner, publish=lambda kind, server=None, **data: principals.append(data["principal"])
        )
        for _ in range(2):
            call = guard.call_tool("notes", "add_note", {}, client=f"{alice}/request-1")
            self.successResultOf(run(call))
        self.assertEqual(principals, [alice, alice])

    def test_hidden_refused_alike(self) -> None:
        shown, _, _, counts, calls = self.assertSame(
            {"tools": {"deny": ["drop_*"]}}, "drop_all", {}
        )
        self.assertEqual(shown[0], ToolHidden)
        self.assertEqual(shown[3]["setting"], "tools.deny")
        self.assertEqual((counts, calls), ({("denied", "notes"): 1}, []))

    def test_confirmation_asked_alike(self) -> None:
        shown, events, asked, counts, _ = self.assertSame(
            {"confirmDestructive": True}, "delete_note", {"id": 1}
        )
        self.assertTrue(shown["isError"])
        self.assertEqual(asked, ["confirmDestructive (the server marks it destructiveHint)"])
        self.assertEqual(
            [kind for kind, _, _ in events], ["policy.confirm_asked", "policy.confirm_answered"]
        )
        self.assertEqual(counts, {("declined", "notes"): 1})

    def test_confirm_pattern_asked_alike(self) -> None:
        shown, _, asked, counts, calls = self.assertSame(
            {"tools": {"confirm": ["add_*"]}}, "add_note", {"text": "a"}
        )
        self.assertTrue(shown["isError"])
        self.assertEqual(asked, ["tools.confirm pattern 'add_*'"])
        self.assertEqual((counts, calls), ({("declined", "notes"): 1}, []))

    def test_confirmation_follows_reloads(self) -> None:
        """
        Calls decided at once (the list cached, the schemas compiled) are held against
        the policy in force at each call: a reload that adds C{tools.confirm} has the
        next call confirmed (declined here, so never made), and one that takes it away
        again has the next made without a question.
        """
        inner = InnerPool(configured(notes={}))
        inner.cached = True
        asked: list[str] = []

        async def confirm(call: Confirmation) -> bool:
            asked.append(call.why)
            return False

        guard = GuardedPool(inner, confirm=confirm)
        made: list[object] = []
        for entry in ({}, {}, {"tools": {"confirm": ["add_*"]}}, {}):
            self.successResultOf(run(guard.reload(configured(notes=entry))))
            result = self.successResultOf(run(guard.call_tool("notes", "add_note", {"text": "a"})))
            made.append((result.get("isError", False), list(asked), len(inner.calls)))
            asked.clear()
        confirmed = ["tools.confirm pattern 'add_*'"]
        self.assertEqual(
            made, [(False, [], 1), (False, [], 2), (True, confirmed, 2), (False, [], 3)]
        )
        self.assertEqual(inner.lists, 0)

    def test_valid_and_unlisted_pass_alike(self) -> None:
        self.assertSame({}, "add_note", {"text": "a"})
        _, _, _, _, calls = self.assertSame({}, "not_listed", {"x": 1})
        self.assertEqual(calls, [("not_listed", {"x": 1})])

    def test_output_checked_alike(self) -> None:
        inner = InnerPool(configured(notes={"validate": {"output": "enforce"}}))
        inner.cached = True
        inner.answer = {"content": [], "structuredContent": {"id": "x"}}
        guard = GuardedPool(inner)
        messages = [
            str(
                self.failureResultOf(
                    run(guard.call_tool("notes", "add_note", {"text": "a"})), InvalidOutput
                ).value
            )
            for _ in range(2)
        ]
        self.assertEqual(messages[1], messages[0])
        self.assertEqual(guard.counts["output", "notes"], 2)


class OutputTests(SynchronousTestCase):
    def test_warn_by_default_passes(self) -> None:
        inner = InnerPool(configured(notes={}))
        inner.answer = {"content": [], "structuredContent": {"id": "x"}}
        guard = GuardedPool(inner)
        result = self.successResultOf(run(guard.call_tool("notes", "add_note", {"text": "a"})))
        self.assertEqual(result["structuredContent"], {"id": "x"})
        self.assertEqual(guard.counts["output", "notes"], 1)

    def test_enforce_refuses(self) -> None:
        inner = InnerPool(configured(notes={"validate": {"output": "enforce"}}))
        inner.answer = {"content": [], "structuredContent": {"id": "x"}}
        failure = self.failureResultOf(
            run(GuardedPool(inner).call_tool("notes", "add_note", {"text": "a"})), InvalidOutput
        )
        self.assertIn("/id: 'x' is not of type 'integer'", str(failure.value))

    def test_enforce_refuses_missing_structured_content(self) -> None:
        inner = InnerPool(configured(notes={"validate": {"output": "enforce"}}))
        inner.answer = {"content": []}
        self.failureResultOf(
            run(GuardedPool(inner).call_tool("notes", "add_note", {"text": "a"})), InvalidOutput
        )

    def test_tool_errors_not_checked(self) -> None:
        inner = InnerPool(configured(notes={"validate": {"output": "enforce"}}))
        inner.answer = {"content": [], "isError": True}
        self.successResultOf(run(GuardedPool(inner).call_tool("notes", "add_note", {"text": "a"})))


class ConfirmationTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.asked: list[Confirmation] = []
        self.answers: list[Deferred[bool]] = []

    async def confirm(self, call: Confirmation) -> bool:
        self.asked.append(call)
        answer: Deferred[bool] = Deferred()
        self.answers.append(answer)
        return await answer

    def guarded(self, **entry: object) -> tuple[GuardedPool, InnerPool]:
        inner = InnerPool(configured(notes=entry))
        return GuardedPool(inner, confirm=self.confirm), inner

    def test_confirmed_call_runs_after_yes(self) -> None:
        guard, inner = self.guarded(tools={"confirm": ["delete_*"]})
        calling = run(guard.call_tool("notes", "delete_note", {"id": 4}))
        self.assertNoResult(calling)
        self.assertEqual(inner.calls, [])
        self.assertEqual(self.asked[0].why, "tools.confirm pattern 'delete_*'")
        self.assertIn("'delete_note' of server 'notes'", self.asked[0].question()["message"])
        self.assertIn('{"id": 4}', self.asked[0].question()["message"])
        self.answers[0].callback(True)
        self.successResultOf(calling)
        self.assertEqual(inner.calls, [("delete_note", {"id": 4})])

    def test_a_subjects_confirmation_is_its_own(self) -> None:
        """
        A call with no caller of its own (an MCP request that declared nothing) made for
        an access token's subject: the confirmation, and the question it becomes in the
        broker, are that subject's, as for a /v1 call; the owner's call's are nobody's
        else.
        """
        guard, _inner = self.guarded(tools={"confirm": ["delete_*"]})
        alice = subject_identity("alice")
        run(guard.call_tool("notes", "delete_note", {"id": 4}, client=f"{alice}/request-3"))
        run(guard.call_tool("notes", "delete_note", {"id": 5}, client="cli"))
        self.assertEqual([asked.call.owner for asked in self.asked], [alice, None])

    def test_declined_never_runs(self) -> None:
        guard, inner = self.guarded(tools={"confirm": ["delete_*"]})
        calling = run(guard.call_tool("notes", "delete_note", {"id": 4}))
        self.answers[0].callback(False)
        result = self.successResultOf(calling)
        self.assertTrue(result["isError"])
        self.assertIn("the server never saw the call", result["content"][0]["text"])
        self.assertEqual(inner.calls, [])

    def test_destructive_annotation_asks(self) -> None:
        guard, _inner = self.guarded(confirmDestructive=True)
        run(guard.call_tool("notes", "delete_note", {"id": 1}))
        self.assertEqual(len(self.asked), 1)
        self.assertIn("confirmDestructive", self.asked[0].why)

    def test_read_only_claim_does_not_ask(self) -> None:
        guard, _inner = self.guarded(confirmDestructive=True)
        self.successResultOf(run(guard.call_tool("notes", "wipe", {})))
        self.assertEqual(self.asked, [])

    def test_annotations_never_relax_confirm(self) -> None:
        guard, _inner = self.guarded(tools={"confirm": ["wipe"]})
        calling = run(guard.call_tool("notes", "wipe", {}))
        self.assertEqual(len(self.asked), 1)
        self.answers[0].callback(False)
        self.assertTrue(self.successResultOf(calling)["isError"])

    def test_without_asker_declines(self) -> None:
        inner = InnerPool(configured(notes={"tools": {"confirm": ["*"]}}))
        result = self.successResultOf(
            run(GuardedPool(inner).call_tool("notes", "add_note", {"text": "a"}))
        )
        self.assertTrue(result["isError"])
        self.assertEqual(inner.calls, [])

    def test_caller_passed_on(self) -> None:
        guard, _ = self.guarded(tools={"confirm": ["*"]})
        caller = Call("c1", {"elicitation": {}}, None)
        run(guard.call_tool("notes", "add_note", {"text": "a"}, call=caller))
        self.assertIs(self.asked[0].call, caller)

    def test_said_yes(self) -> None:
        self.assertTrue(said_yes({"action": "accept", "content": {"confirm": True}}))
        self.assertFalse(said_yes({"action": "accept", "content": {"confirm": False}}))
        self.assertFalse(said_yes({"action": "decline"}))
        self.assertFalse(said_yes({"action": "cancel"}))


class ReloadTests(SynchronousTestCase):
    def test_policy_change_reported(self) -> None:
        inner = InnerPool(configured(notes={}, other={}))
        guard = GuardedPool(inner)
        report = self.successResultOf(
            run(guard.reload(configured(notes={"tools": {"deny": ["drop_*"]}}, other={})))
        )
        self.assertEqual(report.policy_changed, ("notes",))
        self.assertEqual(report.to_json()["policy_changed"], ["notes"])
        names = [t["name"] for t in self.successResultOf(run(guard.tools("notes")))]
        self.assertNotIn("drop_all", names)

    def test_same_policy_reports_nothing(self) -> None:
        inner = InnerPool(configured(notes={"confirmDestructive": True}))
        report = self.successResultOf(
            run(GuardedPool(inner).reload(configured(notes={"confirmDestructive": True})))
        )
        self.assertEqual(report.policy_changed, ())
