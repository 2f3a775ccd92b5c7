"""
Tests for L{mcpx.server.request_state}: the signed C{requestState} a 2026-07-28 client
sends back with its answers, and each way a state is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.server.request_state import RequestState, StateSigner, binding
from mcpx.wire.errors import INVALID_PARAMS, RpcError

METHOD = "tools/call"
PARAMS: dict[str, Any] = {"name": "github__create_issue", "arguments": {"title": "bug"}}
NOW = 1000.0
EXPIRES = NOW + 60.0


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def flipped(text: str, index: int) -> str:
    """C{text} with the base64url character at C{index} changed to another."""
    replacement = "A" if text[index] != "A" else "B"
    return text[:index] + replacement + text[index + 1 :]


class RequestStateTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.signer = StateSigner()
        self.state = RequestState("call-7", binding(METHOD, PARAMS), 2, EXPIRES)
        self.token = self.signer.issue(self.state)

    def refused(
        self,
        token: object,
        method: str = METHOD,
        params: Mapping[str, Any] = PARAMS,
        now: float = NOW,
        signer: StateSigner | None = None,
        subject: str | None = None,
    ) -> str:
        """The message C{token} is refused with (-32602, invalid params)."""
        with self.assertRaises(RpcError) as caught:
            (signer or self.signer).verify(token, method, params, now, subject)
        self.assertEqual(caught.exception.code, INVALID_PARAMS)
        message: str = caught.exception.message
        return message

    def test_round_trip(self) -> None:
        """A state comes back as it was issued: the call, its binding, rounds and expiry."""
        self.assertEqual(self.signer.verify(self.token, METHOD, PARAMS, NOW), self.state)

    def test_token_shape(self) -> None:
        """A state is two base64url parts, payload and MAC, with no padding."""
        payload, mac = self.token.split(".")
        self.assertNotIn("=", self.token)
        self.assertEqual(len(unb64(mac)), hashlib.sha256().digest_size)
        self.assertEqual(json.loads(unb64(payload))["c"], "call-7")

    def test_valid_until_expiry(self) -> None:
        """A state is accepted up to and including its expiry time."""
        self.assertEqual(self.signer.verify(self.token, METHOD, PARAMS, EXPIRES), self.state)

    def test_tampered_payload(self) -> None:
        """A state whose payload was changed is refused as altered."""
        payload, mac = self.token.split(".")
        body = json.loads(unb64(payload))
        body["r"] = 0  # a client resetting its round count
        forged = b64(json.dumps(body, separators=(",", ":")).encode()) + "." + mac
        message = self.refused(forged)
        self.assertIn("altered", message)
        self.assertIn("requestState", message)
        self.assertIn("altered", self.refused(flipped(payload, 3) + "." + mac))

    def test_tampered_mac(self) -> None:
        """A state whose MAC was changed is refused as altered."""
        payload, mac = self.token.split(".")
        self.assertIn("altered", self.refused(payload + "." + flipped(mac, 0)))
        self.assertIn("altered", self.refused(payload + "."))

    def test_garbage(self) -> None:
        """Something that is not shaped like a state at all is refused as not one mcpx issued."""
        for garbage in ("", "nodot", "a.b.c", None, 42, {"c": "call-7"}):
            message = self.refused(garbage)
            self.assertIn("not one mcpx issued", message, garbage)

    def test_unreadable(self) -> None:
        """A correctly signed payload that is not a state is refused as unreadable."""
        key = b"k" * 32
        signer = StateSigner(key)
        for body in (b"not json", b'{"c": "call-7"}', b'{"c":"x","b":"y","r":"many","e":1}'):
            payload = b64(body)
            mac = b64(hmac.new(key, payload.encode("ascii"), hashlib.sha256).digest())
            message = self.refused(f"{payload}.{mac}", signer=signer)
            self.assertIn("cannot be read", message, body)

    def test_expired(self) -> None:
        """A state past its expiry is refused as expired, naming the setting."""
        message = self.refused(self.token, now=EXPIRES + 0.001)
        self.assertIn("expired", message)
        self.assertIn("proto.stateTTL", message)

    def test_other_method(self) -> None:
        """A state sent with another method is refused as issued for a different request."""
        message = self.refused(self.token, method="prompts/get")
        self.assertIn("issued for a tools/call request, not prompts/get", message)

    def test_other_subject(self) -> None:
        """
        A state issued to one access token's subject is refused when sent back by
        another, or with no token, and the other way round; its own subject resumes.
        """
        alices = RequestState("call-7", binding(METHOD, PARAMS), 2, EXPIRES, "alice")
        token = self.signer.issue(alices)
        self.assertEqual(self.signer.verify(token, METHOD, PARAMS, NOW, "alice"), alices)
        for other in ("bob", None):
            message = self.refused(token, subject=other)
            self.assertIn("issued to another caller", message)
            self.assertNotIn("alice", message)
        self.assertIn("another caller", self.refused(self.token, subject="alice"))

    def test_other_params(self) -> None:
        """A state sent with other parameters is refused as issued for a different request."""
        other = {**PARAMS, "arguments": {"title": "feature"}}
        message = self.refused(self.token, params=other)
        self.assertIn("with other parameters", message)
        self.assertIn("with other parameters", self.refused(self.token, params={"name": "x"}))

    def test_foreign_signer(self) -> None:
        """
        A state issued by another signer (another daemon process, whose key died with it)
        is refused, and the message says a restarted daemon cannot resume it.
        """
        message = self.refused(StateSigner().issue(self.state))
        self.assertIn("restarted", message)

    def test_causes_distinct(self) -> None:
        """
        Garbage, an altered state, an unreadable one, an expired one and one sent with the
        wrong request are each refused with a message of their own.
        """
        key = b"k" * 32
        signer = StateSigner(key)
        token = signer.issue(self.state)
        payload, mac = token.split(".")
        junk = b64(b"junk")
        junk_mac = b64(hmac.new(key, junk.encode("ascii"), hashlib.sha256).digest())
        messages = {
            "garbage": self.refused("garbage", signer=signer),
            "altered": self.refused(payload + "." + flipped(mac, 0), signer=signer),
            "unreadable": self.refused(f"{junk}.{junk_mac}", signer=signer),
            "expired": self.refused(token, now=EXPIRES + 1, signer=signer),
            "other request": self.refused(token, method="resources/read", signer=signer),
        }
        self.assertEqual(len(set(messages.values())), len(messages), messages)

    def test_foreign_distinct_from_tampered(self) -> None:
        """A state from another daemon process is told apart from one that was altered."""
        payload, mac = self.token.split(".")
        altered = self.refused(payload + "." + flipped(mac, 0))
        foreign = self.refused(StateSigner().issue(self.state))
        self.assertNotEqual(altered, foreign)

    def test_method_distinct_from_params(self) -> None:
        """A state sent with another method is told apart from one sent with other params."""
        method = self.refused(self.token, method="prompts/get")
        params = self.refused(self.token, params={**PARAMS, "arguments": {}})
        self.assertNotEqual(method, params)


class BindingTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.signer = StateSigner()
        self.token = self.signer.issue(RequestState("call-7", binding(METHOD, PARAMS), 1, EXPIRES))

    def test_retry_fields_unbound(self) -> None:
        """C{_meta}, C{inputResponses} and C{requestState} change on a retry; the state holds."""
        retry = {
            **PARAMS,
            "_meta": {"progressToken": 9, "io.modelcontextprotocol/clientCapabilities": {}},
            "inputResponses": {"who": {"action": "accept", "content": {"name": "ada"}}},
            "requestState": self.token,
        }
        state = self.signer.verify(self.token, METHOD, retry, NOW)
        self.assertEqual(state.call, "call-7")
        self.assertEqual(binding(METHOD, retry), binding(METHOD, PARAMS))

    def test_key_order(self) -> None:
        """The same parameters in another order are the same request."""
        reordered = {"arguments": {"title": "bug"}, "name": "github__create_issue"}
        self.assertEqual(binding(METHOD, reordered), binding(METHOD, PARAMS))
        self.signer.verify(self.token, METHOD, reordered, NOW)

    def test_bound_to_method_and_params(self) -> None:
        """The binding changes with the method and with any bound parameter, however deep."""
        base = binding(METHOD, PARAMS)
        self.assertNotEqual(binding("prompts/get", PARAMS), base)
        self.assertNotEqual(binding(METHOD, {**PARAMS, "arguments": {"title": "bug "}}), base)
        self.assertNotEqual(binding(METHOD, {**PARAMS, "extra": None}), base)
        self.assertTrue(base.startswith(METHOD + " "))

    def test_original_params_untouched(self) -> None:
        """Computing a binding leaves the request's parameters as they were."""
        params = {**PARAMS, "_meta": {"a": 1}}
        binding(METHOD, params)
        self.assertEqual(params, {**PARAMS, "_meta": {"a": 1}})
