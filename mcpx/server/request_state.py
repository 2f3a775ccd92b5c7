# -*- test-case-name: tests.server.test_request_state -*-
"""
The C{requestState} mcpx hands a 2026-07-28 client with an C{input_required} result.

The client must send it back untouched with its answers.  It names the call that is
waiting (which runs on in the daemon), binds it to the request it was issued for (the
method and a digest of the parameters, leaving out C{_meta}, C{inputResponses} and
C{requestState}, which change between retries by design) and to the access token's
subject it was issued to, if any (so another subject cannot replay it), counts the rounds
so a retry cannot reset them, and expires.  It is C{base64url(payload) "." base64url(HMAC-SHA256)}
under a key made when the daemon starts and never written anywhere: a state outlives
neither its TTL nor the daemon process that issued it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from typing import Any, Final

from attrs import frozen

from mcpx.wire.errors import RpcError

#: The parameters a retry changes, so they are not part of what a state is bound to.
UNBOUND_PARAMS: Final = frozenset(("_meta", "inputResponses", "requestState"))


def binding(method: str, params: Mapping[str, Any]) -> str:
    """What a state is bound to: C{method} and a SHA-256 of the bound parameters."""
    bound = {key: value for key, value in params.items() if key not in UNBOUND_PARAMS}
    canonical = json.dumps(bound, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{method} {hashlib.sha256(canonical.encode()).hexdigest()}"


@frozen
class RequestState:
    """
    What a verified state says.

    @ivar call: the id of the call waiting for the answers.
    @ivar binding: see L{binding}.
    @ivar rounds: how many times this call has come back asking, this one included.
    @ivar expires: the clock time after which the state is refused.
    @ivar subject: the access token's subject of the request it was issued to, or C{None}.
    """

    call: str
    binding: str
    rounds: int
    expires: float
    subject: str | None = None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StateSigner:
    """Issues and verifies states under one process-lifetime key."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)
        #: Names this signer's key in every state, so a state another daemon process
        #: issued can be told from one that was altered.
        self._key_id = hashlib.sha256(b"mcpx key id" + self._key).hexdigest()[:8]

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest())

    def issue(self, state: RequestState) -> str:
        body = json.dumps(
            {
                "k": self._key_id,
                "c": state.call,
                "b": state.binding,
                "r": state.rounds,
                "e": state.expires,
                "s": state.subject,
            },
            separators=(",", ":"),
        )
        payload = _b64(body.encode())
        return f"{payload}.{self._mac(payload)}"

    def verify(
        self,
        token: object,
        method: str,
        params: Mapping[str, Any],
        now: float,
        subject: str | None = None,
    ) -> RequestState:
        """
        The state C{token} carries, if it is genuine, current and issued for this request.

        @param subject: the access token's subject of the request that sent it back.
        @raise RpcError: -32602 saying which: not one mcpx issued (or altered), expired,
            issued to another subject, or issued for a different request.
        """
        if not isinstance(token, str) or token.count(".") != 1:
            raise RpcError.invalid_params(
                "requestState is not one mcpx issued: send it back exactly as it came"
            )
        payload, mac = token.split(".")
        if not hmac.compare_digest(mac, self._mac(payload)):
            if self._issuer(payload) not in (None, self._key_id):
                raise RpcError.invalid_params(
                    "requestState was issued by another mcpx daemon process (this one "
                    "restarted since, or the request went to another daemon); it cannot "
                    "resume here: send the request again without requestState"
                )
            raise RpcError.invalid_params(
                "requestState was altered: send it back exactly as it came, or send the "
                "request again without it"
            )
        try:
            body = json.loads(_unb64(payload))
            issued_to = body.get("s")
            state = RequestState(
                str(body["c"]),
                str(body["b"]),
                int(body["r"]),
                float(body["e"]),
                None if issued_to is None else str(issued_to),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise RpcError.invalid_params(f"requestState cannot be read: {e}") from None
        if now > state.expires:
            raise RpcError.invalid_params(
                "requestState has expired (proto.stateTTL): send the request again without it"
            )
        if state.subject != subject:
            # Said without naming either subject: the caller learns nothing of the other.
            raise RpcError.invalid_params(
                "requestState was issued to another caller: send the request again without it"
            )
        bound = binding(method, params)
        if state.binding != bound:
            issued_for = state.binding.partition(" ")[0]
            if issued_for != method:
                raise RpcError.invalid_params(
                    f"requestState was issued for a {issued_for} request, not {method}: "
                    "send it only with the request whose answer carried it"
                )
            raise RpcError.invalid_params(
                f"requestState was issued for a {method} request with other parameters: "
                "resend the original parameters unchanged (only inputResponses and _meta "
                "may differ)"
            )
        return state

    @staticmethod
    def _issuer(payload: str) -> str | None:
        """The key id an unverified payload claims, if it can be read at all."""
        try:
            claimed = json.loads(_unb64(payload)).get("k")
        except (ValueError, AttributeError):
            return None
        return claimed if isinstance(claimed, str) else None
