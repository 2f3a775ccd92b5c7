"""Properties of L{mcpx.wire.messages.parse}: a message, or a JSON-RPC error, never a crash."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from mcpx.wire.errors import INVALID_REQUEST, PARSE_ERROR, ProtocolError, RpcError
from mcpx.wire.messages import (
    Batch,
    ErrorResponse,
    Message,
    Notification,
    Request,
    Response,
    encode,
    parse,
)
from tests.properties import bounded, hostile_bytes, json_objects, json_values

ids = st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=10)
params = st.none() | json_objects | st.lists(json_values, max_size=4)

messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(Request, ids, st.text(max_size=20), params),
    st.builds(Notification, st.text(max_size=20), params),
    st.builds(Response, ids, json_values),
    st.builds(
        ErrorResponse,
        st.none() | ids,
        st.builds(RpcError, st.integers(-33000, 33000), st.text(max_size=20), json_values),
    ),
)

#: Envelopes that look like JSON-RPC, with each field sometimes of the wrong type.
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2.0]) | json_values,
        "id": ids | json_values,
        "method": st.sampled_from(["initialize", "tools/call", "ping"]) | json_values,
        "params": params | json_values,
        "result": json_values,
        "error": json_objects
        | st.fixed_dictionaries({"code": st.integers(), "message": st.text(max_size=10)}),
    },
)


class ParseProperties(SynchronousTestCase):
    def check_refusal(self, error: ProtocolError) -> None:
        self.assertIn(error.code, (PARSE_ERROR, INVALID_REQUEST))
        self.assertIsInstance(error.message, str)
        # The answer that would carry it can always be written.
        json.loads(encode(ErrorResponse(error.id, error)))

    @bounded(200)
    @given(hostile_bytes)
    def test_any_bytes_parse_or_refuse(self, data: bytes) -> None:
        """
        Any bytes either parse into messages or raise a ProtocolError (-32700 or -32600)
        whose error response encodes; nothing else is ever raised.
        """
        for allow_batch in (False, True):
            try:
                parsed = parse(data, allow_batch=allow_batch)
            except ProtocolError as e:
                self.check_refusal(e)
            else:
                self.assertIsInstance(
                    parsed, Request | Notification | Response | ErrorResponse | Batch
                )
                for error in parsed.invalid if isinstance(parsed, Batch) else ():
                    self.check_refusal(error)

    @bounded(200)
    @given(envelopes | st.lists(envelopes, max_size=4))
    def test_any_envelope_parse_or_refuse(self, value: Any) -> None:
        """Objects shaped like JSON-RPC, field types wrong or right, parse or are refused."""
        try:
            parsed = parse(json.dumps(value), allow_batch=True)
        except ProtocolError as e:
            self.check_refusal(e)
        else:
            if isinstance(parsed, Batch) and not parsed.messages:
                return
            # What parsed writes back as JSON that parses to the same message.
            self.assertEqual(parse(encode(parsed), allow_batch=True), _valid_only(parsed))

    @bounded(200)
    @given(messages)
    def test_round_trip(self, message: Message) -> None:
        """Every message mcpx can build encodes to text that parses back to it."""
        self.assertEqual(parse(encode(message)), message)


def _valid_only(parsed: Message | Batch) -> Message | Batch:
    return Batch(parsed.messages) if isinstance(parsed, Batch) else parsed
