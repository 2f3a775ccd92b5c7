"""
C{POST /v1/call} names its call: the L{Call} it gives the pool carries the C{call_id}
the request chose, the task's id, or one the daemon made up, so the questions the upstream
asks during the call can be found by it in C{/v1/questions}.
"""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call
from mcpx.ops.errors import OpError
from mcpx.ops.table import BY_NAME
from tests.daemon.fake_pool import Harness

CALL = {"server": "files", "tool": "read_file", "arguments": {"path": "a"}}


class CallCallerTests(SynchronousTestCase):
    """Which caller a C{/v1/call} is made for."""

    def setUp(self) -> None:
        self.harness = Harness()
        self.pool = self.harness.pool

    def caller(self) -> Call:
        """The caller of the one call the pool was asked to make."""
        [caller] = self.pool.callers
        assert isinstance(caller, Call), caller
        return caller

    def test_given_call_id(self) -> None:
        """A call that names a call_id is made for a caller of that id, which declares
        nothing and cannot be asked directly (its questions go to the broker)."""
        answer = self.harness.post("/v1/call", {**CALL, "call_id": "cli-0123456789ab"})
        self.assertEqual(answer.code, 200, answer.body)
        caller = self.caller()
        self.assertEqual((caller.id, dict(caller.capabilities)), ("cli-0123456789ab", {}))
        self.assertIsNone(caller.asker)

    def test_generated_call_id(self) -> None:
        """A call that names none gets one of its own, v1- and a number, different for each
        call."""
        self.harness.post("/v1/call", CALL)
        self.harness.post("/v1/call", CALL)
        ids = [caller.id for caller in self.pool.callers if isinstance(caller, Call)]
        self.assertEqual(len(ids), 2, self.pool.callers)
        for call_id in ids:
            self.assertRegex(call_id, r"^v1-\d+$")
        self.assertNotEqual(ids[0], ids[1])

    def test_task_named_after_itself(self) -> None:
        """A task's call is named after the task, the id to collect it by."""
        self.pool.hold = True
        answer = self.harness.post("/v1/call", {**CALL, "task": True})
        self.assertEqual(answer.code, 202, answer.body)
        self.assertEqual(self.caller().id, answer.json["task"]["id"])

    def test_task_with_call_id(self) -> None:
        """A task that names a call_id keeps that name."""
        self.pool.hold = True
        answer = self.harness.post("/v1/call", {**CALL, "task": True, "call_id": "mine"})
        self.assertEqual(answer.code, 202, answer.body)
        self.assertEqual(self.caller().id, "mine")

    def test_bad_call_id_refused(self) -> None:
        """A call_id with a space, one too long and an empty one are refused, naming the
        field; the tool is not called."""
        for bad in ("two words", "x" * 65, "", 7):
            answer = self.harness.post("/v1/call", {**CALL, "call_id": bad})
            self.assertEqual(answer.code, 400, (bad, answer.body))
            self.assertEqual(answer.json["error"]["field"], "call_id", bad)
        self.assertEqual(self.pool.calls, [])


class CallIdSchemaTests(SynchronousTestCase):
    """The op's schema says what a call_id is, and its quick check agrees with it."""

    op = BY_NAME["call_tool"]

    def test_documented(self) -> None:
        """call_id is in the op's input schema with its pattern and a description, and
        the op's description says where questions go."""
        schema = self.op.properties["call_id"]
        self.assertEqual(schema["pattern"], "^[A-Za-z0-9_.-]{1,64}$")
        self.assertIn("questions", schema["description"])
        self.assertIn("call_id", self.op.description)

    def test_quick_check_agrees(self) -> None:
        """The hot path's quick check stays on for call_id, says yes to good ids and never
        says yes where jsonschema says no."""
        accepts = self.op.accepts
        assert accepts is not None
        good = ("cli-0123456789ab", "a", "A.b_c-9", "x" * 64)
        bad: tuple[object, ...] = ("", "x" * 65, "a b", "é", "a/b", 3, None)
        for value in good:
            args: dict[str, Any] = {**CALL, "call_id": value}
            self.assertTrue(accepts(args), value)
            self.assertTrue(self.op.validator.is_valid(args), value)
        for wrong in bad:
            refused = {**CALL, "call_id": wrong}
            self.assertFalse(accepts(refused), wrong)
            self.assertRaises(OpError, self.op.check, refused)
