"""
A question an upstream asks is spelled for the revision of the client it is put to:
an C{elicitation/create} from a 2025-11-25 upstream (C{mode: "form"}) reaches a
2025-06-18 client without C{mode}, which that revision's schema does not have.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.trial.unittest import SynchronousTestCase

from mcpx.server.conn import STDIO, Conn
from mcpx.server.resumable import ConnAsker
from mcpx.spec.downgrade import question
from mcpx.spec.questions import may_ask
from mcpx.spec.revision import Revision
from mcpx.spec.schemas import violations
from tests.server import result_of
from tests.server.test_asking import FakeClient, Gateway, call_params

FORM = {
    "mode": "form",
    "message": "Your name?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}


class ConnAskerSpellingTests(SynchronousTestCase):
    def asked(self, revision: Revision, method: str, params: dict[str, Any]) -> dict[str, Any]:
        sent: list[dict[str, Any]] = []

        def ask(method: str, params: dict[str, Any]) -> Deferred[Any]:
            sent.append(params)
            return succeed({"action": "decline"})

        conn = Conn(STDIO, "stdio:1", ask=ask, revision=revision)
        asker = ConnAsker(conn, None)
        self.successResultOf(asker.ask(method, params, "q1"))
        return sent[0]

    def test_form_elicitation_to_2025_06_18_has_no_mode(self) -> None:
        """The 2025-06-18 client gets the form without C{mode}, valid for its schema."""
        params = self.asked(Revision.V2025_06_18, "elicitation/create", dict(FORM))
        self.assertNotIn("mode", params)
        self.assertEqual(params["message"], "Your name?")
        message = {"method": "elicitation/create", "params": params}
        self.assertEqual(violations(message, Revision.V2025_06_18, "ElicitRequest"), [])

    def test_form_elicitation_to_2025_11_25_keeps_mode(self) -> None:
        """A 2025-11-25 client gets the question as the upstream asked it."""
        params = self.asked(Revision.V2025_11_25, "elicitation/create", dict(FORM))
        self.assertEqual(params, FORM)

    def test_sampling_with_tools_to_2025_06_18_loses_them(self) -> None:
        """Sampling fields 2025-06-18 lacks (tools, toolChoice) are not sent to it."""
        params = self.asked(
            Revision.V2025_06_18,
            "sampling/createMessage",
            {"messages": [], "maxTokens": 5, "tools": [], "toolChoice": {"mode": "auto"}},
        )
        self.assertEqual(params, {"messages": [], "maxTokens": 5})


class RevisionCapabilityTests(SynchronousTestCase):
    """A capability the client's revision lacks is not taken as a promise."""

    def test_2025_03_26_client_declaring_elicitation_is_not_asked_for_it(self) -> None:
        """
        A 2025-03-26 client that declares C{elicitation} (the TS client v2 does) is not
        put an C{elicitation/create}, which that revision has no schema for; its
        sampling capability still counts.
        """
        gateway = Gateway()
        conn = gateway.server.open(Conn("stdio", "host", ask=FakeClient().ask))
        result_of(
            gateway.handle(
                conn,
                "initialize",
                {
                    "protocolVersion": "2025-03-26",
                    "capabilities": {"elicitation": {}, "sampling": {}},
                    "clientInfo": {"name": "old", "version": "1"},
                },
            )
        )
        gateway.handle(conn, "tools/call", call_params(None, _meta={}))
        caller = gateway.caller()
        self.assertEqual(dict(caller.capabilities), {"sampling": {}})
        self.assertFalse(may_ask(caller.capabilities, "elicitation/create", FORM))


class MultiSelectTests(SynchronousTestCase):
    """Multi-select fields (2025-11-25) are not put to an older client's form."""

    FORM: dict[str, Any] = {
        "mode": "form",
        "message": "Pick",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "colours": {"type": "array", "items": {"type": "string", "enum": ["red"]}},
            },
            "required": ["name", "colours"],
        },
    }

    def test_2025_06_18_form_has_no_array_field(self) -> None:
        """The 2025-06-18 form keeps the rest, valid in its schema."""
        params = question("elicitation/create", self.FORM, Revision.V2025_06_18)
        self.assertEqual(
            params["requestedSchema"],
            {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        )
        message = {"method": "elicitation/create", "params": params}
        self.assertEqual(violations(message, Revision.V2025_06_18, "ElicitRequest"), [])

    def test_2025_11_25_form_is_untouched(self) -> None:
        """A 2025-11-25 client gets the form as asked."""
        self.assertIs(question("elicitation/create", self.FORM, Revision.V2025_11_25), self.FORM)
