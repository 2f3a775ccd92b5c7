"""
Tests for L{mcpx.call}: which questions a client may be put, what mcpx
declares upstream on its behalf, and the answers a client sends ahead.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call as Caller
from mcpx.call import narrowed
from mcpx.spec.questions import ELICIT, LIST_ROOTS, SAMPLE, may_ask

FORM: dict[str, Any] = {
    "message": "who are you?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
FORM_EXPLICIT: dict[str, Any] = {**FORM, "mode": "form"}
URL: dict[str, Any] = {
    "mode": "url",
    "message": "sign in",
    "url": "https://example.org/login",
    "elicitationId": "e1",
}
SAMPLING: dict[str, Any] = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
    "maxTokens": 10,
}
TOOL = {"name": "lookup", "inputSchema": {"type": "object"}}


class ElicitationTests(SynchronousTestCase):
    def test_empty_object_is_form_mode(self) -> None:
        """A client that declared C{elicitation: {}} (before modes existed) gets forms."""
        self.assertTrue(may_ask({"elicitation": {}}, ELICIT, FORM))
        self.assertTrue(may_ask({"elicitation": {}}, ELICIT, FORM_EXPLICIT))

    def test_empty_object_is_not_url_mode(self) -> None:
        """An empty elicitation declaration does not cover url mode."""
        self.assertFalse(may_ask({"elicitation": {}}, ELICIT, URL))

    def test_url_only_client_gets_no_form(self) -> None:
        """A 2025-11-25 client that declared only url mode is not sent a form."""
        declared: dict[str, Any] = {"elicitation": {"url": {}}}
        self.assertFalse(may_ask(declared, ELICIT, FORM))
        self.assertFalse(may_ask(declared, ELICIT, FORM_EXPLICIT))
        self.assertTrue(may_ask(declared, ELICIT, URL))

    def test_form_only_client_gets_no_url(self) -> None:
        """A client that declared only form mode is not sent a url elicitation."""
        declared: dict[str, Any] = {"elicitation": {"form": {}}}
        self.assertTrue(may_ask(declared, ELICIT, FORM))
        self.assertFalse(may_ask(declared, ELICIT, URL))

    def test_both_modes(self) -> None:
        """A client that declared both modes may be sent either."""
        declared: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}
        self.assertTrue(may_ask(declared, ELICIT, FORM))
        self.assertTrue(may_ask(declared, ELICIT, URL))

    def test_undeclared(self) -> None:
        """A client that declared no elicitation (or a non-object) is not asked to elicit."""
        undeclared: list[dict[str, Any]] = [
            {},
            {"sampling": {}, "roots": {}},
            {"elicitation": True},
        ]
        for declared in undeclared:
            self.assertFalse(may_ask(declared, ELICIT, FORM), declared)
            self.assertFalse(may_ask(declared, ELICIT, URL), declared)


class SamplingTests(SynchronousTestCase):
    def test_plain_sampling(self) -> None:
        """A client that declared sampling may be asked a plain sampling request."""
        self.assertTrue(may_ask({"sampling": {}}, SAMPLE, SAMPLING))

    def test_undeclared(self) -> None:
        """Declaring elicitation (or nothing) is not declaring sampling."""
        self.assertFalse(may_ask({"elicitation": {}}, SAMPLE, SAMPLING))
        self.assertFalse(may_ask({}, SAMPLE, SAMPLING))
        self.assertFalse(may_ask({"sampling": None}, SAMPLE, SAMPLING))

    def test_tools_need_sampling_tools(self) -> None:
        """Sampling with C{tools} or C{toolChoice} needs C{sampling.tools}."""
        with_tools = {**SAMPLING, "tools": [TOOL]}
        with_choice = {**SAMPLING, "toolChoice": {"mode": "auto"}}
        for params in (with_tools, with_choice):
            self.assertFalse(may_ask({"sampling": {}}, SAMPLE, params))
            self.assertFalse(may_ask({"sampling": {"context": {}}}, SAMPLE, params))
            self.assertTrue(may_ask({"sampling": {"tools": {}}}, SAMPLE, params))

    def test_context_needs_sampling_context(self) -> None:
        """C{includeContext} thisServer or allServers needs C{sampling.context}."""
        for include in ("thisServer", "allServers"):
            params = {**SAMPLING, "includeContext": include}
            self.assertFalse(may_ask({"sampling": {}}, SAMPLE, params), include)
            self.assertFalse(may_ask({"sampling": {"tools": {}}}, SAMPLE, params), include)
            self.assertTrue(may_ask({"sampling": {"context": {}}}, SAMPLE, params), include)

    def test_no_context_needs_nothing_more(self) -> None:
        """C{includeContext: "none"} asks for no context, so plain sampling is enough."""
        params = {**SAMPLING, "includeContext": "none"}
        self.assertTrue(may_ask({"sampling": {}}, SAMPLE, params))

    def test_tools_and_context(self) -> None:
        """A request using tools and context needs both declared."""
        params = {**SAMPLING, "tools": [TOOL], "includeContext": "thisServer"}
        self.assertFalse(may_ask({"sampling": {"tools": {}}}, SAMPLE, params))
        self.assertFalse(may_ask({"sampling": {"context": {}}}, SAMPLE, params))
        self.assertTrue(may_ask({"sampling": {"tools": {}, "context": {}}}, SAMPLE, params))


class RootsTests(SynchronousTestCase):
    def test_declared(self) -> None:
        """A client that declared roots (with or without listChanged) may be asked for them."""
        self.assertTrue(may_ask({"roots": {}}, LIST_ROOTS, {}))
        self.assertTrue(may_ask({"roots": {"listChanged": True}}, LIST_ROOTS, {}))

    def test_undeclared(self) -> None:
        """Without a roots declaration the client is not asked for roots."""
        self.assertFalse(may_ask({}, LIST_ROOTS, {}))
        self.assertFalse(may_ask({"elicitation": {}, "sampling": {}}, LIST_ROOTS, {}))
        self.assertFalse(may_ask({"roots": True}, LIST_ROOTS, {}))

    def test_other_methods(self) -> None:
        """Only the three question methods can ever be put to a client."""
        everything: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}
        self.assertFalse(may_ask(everything, "tools/call", {}))
        self.assertFalse(may_ask(everything, "ping", {}))


class NarrowedTests(SynchronousTestCase):
    def test_keeps_only_questions(self) -> None:
        """Only elicitation, sampling and roots are declared upstream on a client's behalf."""
        declared = {
            "elicitation": {"form": {}, "url": {}},
            "sampling": {"tools": {}},
            "roots": {"listChanged": True},
            "experimental": {"x": {}},
            "tasks": {"list": {}},
        }
        self.assertEqual(
            narrowed(declared),
            {"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}, "roots": {}},
        )

    def test_roots_without_list_changed(self) -> None:
        """Roots are declared without listChanged: mcpx does not relay those notifications."""
        self.assertEqual(narrowed({"roots": {"listChanged": True}}), {"roots": {}})

    def test_missing_kinds_stay_missing(self) -> None:
        """What the client did not declare (or declared as a non-object) is not declared."""
        self.assertEqual(narrowed({}), {})
        self.assertEqual(narrowed({"sampling": True, "roots": None}), {})
        self.assertEqual(narrowed({"sampling": {}}), {"sampling": {}})

    def test_copies(self) -> None:
        """Changing the narrowed declaration leaves the client's own untouched."""
        declared: dict[str, Any] = {"elicitation": {"form": {}}}
        narrowed(declared)["elicitation"]["url"] = {}
        self.assertEqual(declared, {"elicitation": {"form": {}}})


class CallerTests(SynchronousTestCase):
    def test_declared_narrow(self) -> None:
        """A pass-through caller declares upstream what its client declared (narrowed)."""
        caller = Caller("c1", {"sampling": {}, "roots": {"listChanged": True}}, narrow=True)
        self.assertEqual(caller.declared, {"sampling": {}, "roots": {}})

    def test_declared_not_narrow(self) -> None:
        """Otherwise mcpx declares its own capabilities (C{declared} is C{None})."""
        caller = Caller("c1", {"sampling": {}})
        self.assertIsNone(caller.declared)

    def test_take_held_once(self) -> None:
        """An answer sent ahead is given once, to the question with its key."""
        answer = {"action": "accept", "content": {"name": "ada"}}
        caller = Caller("c1", {}, held={"k1": answer, "k2": {"action": "decline"}})
        self.assertIsNone(caller.take_held("other"))
        self.assertEqual(caller.take_held("k1"), answer)
        self.assertIsNone(caller.take_held("k1"))
        self.assertEqual(caller.take_held("k2"), {"action": "decline"})
        self.assertIsNone(caller.take_held("k2"))

    def test_take_held_nothing(self) -> None:
        """With nothing held, or a question without a key, nothing is given."""
        self.assertIsNone(Caller("c1", {}).take_held("k1"))
        self.assertIsNone(Caller("c1", {}, held={}).take_held("k1"))
        self.assertIsNone(Caller("c1", {}, held={"k1": {}}).take_held(None))


class CallEndedTests(SynchronousTestCase):
    """What a call's end does to the questions awaited for it."""

    def awaited(self, caller: Caller, *, attributed: bool) -> Deferred[Any]:
        answer: Deferred[Any] = Deferred()
        caller.awaiting(answer, attributed=attributed)
        return answer

    def test_answered_leaves_attributed_questions(self) -> None:
        """
        The server answers the call: a question tied to it by attribution alone (maybe
        the server's own, asked outside any call) still waits for its answer; one the
        server said was the call's ends with it.
        """
        caller = Caller("call-1", {})
        attributed = self.awaited(caller, attributed=True)
        said = self.awaited(caller, attributed=False)
        caller.call_ended(answered=True)
        self.assertNoResult(attributed)
        self.failureResultOf(said, CancelledError)
        attributed.callback({"roots": []})
        self.assertEqual(self.successResultOf(attributed), {"roots": []})

    def test_given_up_ends_every_question(self) -> None:
        """A call given up on (not answered) ends all its questions, attributed or not."""
        caller = Caller("call-1", {})
        attributed = self.awaited(caller, attributed=True)
        said = self.awaited(caller, attributed=False)
        caller.call_ended(answered=False)
        self.failureResultOf(attributed, CancelledError)
        self.failureResultOf(said, CancelledError)
