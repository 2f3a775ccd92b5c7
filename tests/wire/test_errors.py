"""
Tests for L{mcpx.wire.errors}.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.spec.revision import Revision
from mcpx.wire import errors
from mcpx.wire.errors import (
    ERROR_CODES,
    ProtocolError,
    RpcError,
    http_status_for,
    may_emit,
)


class ErrorTableTests(SynchronousTestCase):
    """
    The table of error codes and the HTTP statuses a 2026-07-28 server answers with.
    """

    def test_every_code_is_listed(self) -> None:
        """
        Each code mcpx deals in has an entry with a name and a default message.
        """
        expected = {
            -32700,
            -32600,
            -32601,
            -32602,
            -32603,
            -32002,
            -32010,
            -32020,
            -32021,
            -32022,
            -32042,
        }
        self.assertEqual(set(ERROR_CODES), expected)
        for code, entry in ERROR_CODES.items():
            self.assertEqual(entry.code, code)
            self.assertTrue(entry.name)
            self.assertTrue(entry.message)

    def test_http_statuses(self) -> None:
        """
        Unknown method is 404, refused requests are 400, internal errors 500, and codes a
        2026-07-28 server never emits ride a 200 like any application error.
        """
        expected = {
            errors.METHOD_NOT_FOUND: 404,
            errors.PARSE_ERROR: 400,
            errors.INVALID_REQUEST: 400,
            errors.INVALID_PARAMS: 400,
            errors.HEADER_MISMATCH: 400,
            errors.MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
            errors.UNSUPPORTED_PROTOCOL_VERSION: 400,
            errors.INTERNAL_ERROR: 500,
            errors.RESOURCE_NOT_FOUND: 200,
            errors.URL_ELICITATION_REQUIRED: 200,
            errors.UPSTREAM_FAILED: 200,
            -1: 200,
            -32099: 200,
        }
        self.assertEqual({code: http_status_for(code) for code in expected}, expected)

    def test_which_revisions_may_emit(self) -> None:
        """
        Resource-not-found is legacy only, URL elicitation is 2025-11-25 only, the header and
        version codes are 2026-07-28 only, and unknown codes are allowed everywhere.
        """
        modern = Revision.V2026_07_28
        self.assertFalse(may_emit(errors.RESOURCE_NOT_FOUND, modern))
        self.assertTrue(may_emit(errors.RESOURCE_NOT_FOUND, Revision.V2024_11_05))
        self.assertTrue(may_emit(errors.URL_ELICITATION_REQUIRED, Revision.V2025_11_25))
        self.assertFalse(may_emit(errors.URL_ELICITATION_REQUIRED, Revision.V2025_06_18))
        self.assertFalse(may_emit(errors.URL_ELICITATION_REQUIRED, modern))
        self.assertTrue(may_emit(errors.HEADER_MISMATCH, modern))
        self.assertFalse(may_emit(errors.UNSUPPORTED_PROTOCOL_VERSION, Revision.V2025_11_25))
        self.assertTrue(may_emit(errors.METHOD_NOT_FOUND, Revision.V2024_11_05))
        self.assertTrue(may_emit(-1, modern))


class RpcErrorTests(SynchronousTestCase):
    """
    L{RpcError} and its constructors.
    """

    def test_default_message(self) -> None:
        """
        Without a message, the table's default message for the code is used.
        """
        self.assertEqual(RpcError(-32601).message, "Method not found")
        self.assertEqual(RpcError(-5).message, "Error")

    def test_to_json_without_data(self) -> None:
        """
        An error without data has no C{data} member on the wire.
        """
        self.assertEqual(RpcError(-32603, "boom").to_json(), {"code": -32603, "message": "boom"})

    def test_to_json_with_data(self) -> None:
        """
        Data is included as given.
        """
        self.assertEqual(
            RpcError(-32602, "bad", {"field": "x"}).to_json(),
            {"code": -32602, "message": "bad", "data": {"field": "x"}},
        )

    def test_from_json(self) -> None:
        """
        An error object from a peer becomes an L{RpcError} with the same members.
        """
        error = RpcError.from_json({"code": -1, "message": "User rejected", "data": [1]})
        self.assertEqual((error.code, error.message, error.data), (-1, "User rejected", [1]))

    def test_method_not_found(self) -> None:
        """
        The method's name is in the message, and the status is 404.
        """
        error = RpcError.method_not_found("tools/frobnicate")
        self.assertEqual(error.code, -32601)
        self.assertIn("tools/frobnicate", error.message)
        self.assertEqual(error.http_status, 404)

    def test_invalid_params(self) -> None:
        """
        Invalid params carries the caller's message and data.
        """
        error = RpcError.invalid_params("unknown tool", {"name": "x"})
        self.assertEqual(
            error.to_json(), {"code": -32602, "message": "unknown tool", "data": {"name": "x"}}
        )

    def test_unsupported_version(self) -> None:
        """
        The unsupported-version error lists what is supported and repeats what was asked.
        """
        error = RpcError.unsupported_version("1999-01-01", ["2026-07-28", "2025-11-25"])
        self.assertEqual(error.code, -32022)
        self.assertEqual(
            error.data, {"supported": ["2026-07-28", "2025-11-25"], "requested": "1999-01-01"}
        )

    def test_unsupported_version_legacy_code(self) -> None:
        """
        A legacy C{initialize} may report the same condition as -32602.
        """
        error = RpcError.unsupported_version("x", ["2024-11-05"], code=errors.INVALID_PARAMS)
        self.assertEqual(error.code, -32602)
        self.assertEqual(error.data["requested"], "x")

    def test_missing_client_capability(self) -> None:
        """
        -32021 names the capabilities that were required.
        """
        error = RpcError.missing_client_capability({"sampling": {}})
        self.assertEqual(error.code, -32021)
        self.assertEqual(error.data, {"requiredCapabilities": {"sampling": {}}})

    def test_other_constructors(self) -> None:
        """
        Each helper produces its own code.
        """
        self.assertEqual(RpcError.invalid_request("x").message, "Invalid Request: x")
        self.assertEqual(RpcError.internal_error().message, "Internal error")
        self.assertEqual(RpcError.resource_not_found("file:///a").data, {"uri": "file:///a"})
        self.assertEqual(RpcError.header_mismatch().code, -32020)

    def test_str_and_repr(self) -> None:
        """
        The text form shows message and code; the repr shows data too.
        """
        error = RpcError(-32602, "bad", {"a": 1})
        self.assertEqual(str(error), "bad (-32602)")
        self.assertEqual(repr(error), "RpcError(-32602, 'bad', data={'a': 1})")


class ProtocolErrorTests(SynchronousTestCase):
    """
    L{ProtocolError}: an L{RpcError} that knows which message it is about.
    """

    def test_carries_id(self) -> None:
        """
        The offending id and whether the message was a response are kept.
        """
        error = ProtocolError(-32600, "nope", id=7, about_response=True)
        self.assertIsInstance(error, RpcError)
        self.assertEqual((error.id, error.about_response), (7, True))
        self.assertEqual(error.to_json(), {"code": -32600, "message": "nope"})

    def test_defaults(self) -> None:
        """
        Without an id, the id is C{None}, and the message is not taken for a response.
        """
        error = ProtocolError(-32700)
        self.assertEqual(
            (error.id, error.about_response, error.message), (None, False, "Parse error")
        )
