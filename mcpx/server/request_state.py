# -*- test-case-name: tests.server.test_request_state -*-
"""
The C{requestState} mcpx hands a 2026-07-28 client with an C{input_required} result.

The client must send it back untouched with its answers.  It names the call that is
waiting (which runs on in the daemon), binds it to the request it was issued for (the
method and a digest of the parameters, leaving out C{_meta}, C{inputResponses} and
C{requestState}, which change between retries by design) and to the access token's
subject it was issued to, if any (so another subject cannot replay it), counts the rounds
so a retry cannot reset them, and expires.  It is C{base64url(payload) "." base64url(HMAC-SHA256)}.

The key is one of a L{KeyRing}: by default one key made when the daemon starts and never
written anywhere (a state outlives neither its TTL nor the daemon process that issued it);
with C{proto.stateKeyFile}, the keys of that file, shared by every daemon of a fleet, so
any daemon verifies a state another issued.  Each state names the key that signed it
(C{k}), the daemon that holds its call (C{d}) and a nonce of its own (C{n}), which its
one-time record in the store is kept under (L{mcpx.server.rounds}).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import math
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Final

from attrs import frozen
from twisted.logger import Logger

from mcpx.settings.resolve import Settings
from mcpx.settings.state_keys import StateKey, StateKeyError, file_stamp, read_state_keys
from mcpx.wire.errors import RpcError

log = Logger()

#: Seconds between two looks at whether the key file changed.
RECHECK: Final = 1.0

_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,40}")

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
    @ivar nonce: this state's own id, under which it is used once (L{mcpx.server.rounds}).
    @ivar daemon: the id of the daemon holding the call.
    """

    call: str
    binding: str
    rounds: int
    expires: float
    subject: str | None = None
    nonce: str = ""
    daemon: str = ""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class KeyRing:
    """
    The keys states are signed and verified with: the newest whose C{since} has come
    signs; an older one verifies until C{ttl} seconds after the key after it took over
    (or after a reload of the file dropped it), then is refused.
    """

    def __init__(
        self, keys: Sequence[StateKey], ttl: float, *, path: str | None = None, now: float = 0.0
    ) -> None:
        """
        @param path: the key file the keys came from, read again when it changes
            (L{refresh}); C{None} for keys of this process only.
        """
        self.ttl = ttl
        self.path = path
        self._keys: dict[str, StateKey] = {}
        #: When each key stopped signing (or will), for those that have a successor.
        self._retired: dict[str, float] = {}
        #: The keys of the file, oldest first (the ones a reload dropped are not).
        self._current: tuple[StateKey, ...] = ()
        self._stamp = file_stamp(path) if path is not None else None
        self._checked = now
        self._load(keys, now)

    @classmethod
    def of_process(cls, ttl: float, secret: bytes | None = None) -> KeyRing:
        """One random key of this process (no C{proto.stateKeyFile})."""
        secret = secret if secret is not None else secrets.token_bytes(32)
        key_id = hashlib.sha256(b"mcpx key id" + secret).hexdigest()[:8]
        return cls((StateKey(key_id, -math.inf, secret),), ttl)

    @classmethod
    def from_file(cls, path: str, ttl: float, now: float) -> KeyRing:
        """The keys of C{path}; L{StateKeyError} if it cannot be used."""
        return cls(read_state_keys(path), ttl, path=path, now=now)

    @property
    def shared(self) -> bool:
        """Whether the keys come from a file (other daemons may hold them too)."""
        return self.path is not None

    def _load(self, keys: Sequence[StateKey], now: float) -> None:
        ordered = tuple(sorted(keys, key=lambda key: key.since))
        retired = {key.id: after.since for key, after in itertools.pairwise(ordered)}
        known = {key.id: key for key in ordered}
        for key_id, key in self._keys.items():
            if key_id in known:
                continue
            # Dropped from the file: it verifies for one TTL from now (or from when it
            # stopped signing, if earlier), then goes.
            ended = min(self._retired.get(key_id, now), now)
            if now <= ended + self.ttl:
                known[key_id] = key
                retired[key_id] = ended
        self._keys, self._retired, self._current = known, retired, ordered

    def refresh(self, now: float) -> None:
        """Read the key file again if it changed (looked at once a second at most)."""
        if self.path is None or now - self._checked < RECHECK:
            return
        self._checked = now
        stamp = file_stamp(self.path)
        if stamp == self._stamp:
            return
        try:
            keys = read_state_keys(self.path)
        except StateKeyError as e:
            log.warn("the keys of requestState are kept as they were: {why}", why=str(e))
            return
        self._stamp = stamp
        self._load(keys, now)
        log.info(
            "read the keys of requestState again from {path}: {key} signs",
            path=self.path,
            key=self.signing(now).id,
        )

    def signing(self, now: float) -> StateKey:
        """The key that signs at C{now}."""
        come = [key for key in self._current if key.since <= now]
        return come[-1] if come else self._current[0]

    def verifying(self, key_id: str, now: float) -> StateKey | None:
        """
        The key C{key_id}, if it still verifies at C{now}.

        @raise RpcError: it is a key of the ring that stopped signing more than a TTL ago.
        """
        key = self._keys.get(key_id)
        if key is None:
            return None
        retired = self._retired.get(key_id)
        if retired is not None and now > retired + self.ttl:
            raise RpcError.invalid_params(
                f"requestState was signed with the key {key_id}, which stopped signing more "
                "than proto.stateTTL ago: send the request again without requestState"
            )
        return key


class StateSigner:
    """Issues and verifies states under the keys of a L{KeyRing}."""

    def __init__(self, key: bytes | None = None, *, ring: KeyRing | None = None) -> None:
        """
        @param key: the one key of this process (random if not given), without C{ring}.
        """
        self.ring = ring if ring is not None else KeyRing.of_process(math.inf, key)

    @staticmethod
    def _mac(key: StateKey, payload: str) -> str:
        return _b64(hmac.new(key.secret, payload.encode("ascii"), hashlib.sha256).digest())

    def issue(self, state: RequestState, now: float | None = None) -> str:
        """
        C{state}, signed by the key that signs at C{now} (by default, the time the state
        was issued at: its expiry less the ring's TTL).
        """
        if now is None:
            now = state.expires - self.ring.ttl if math.isfinite(self.ring.ttl) else math.inf
        self.ring.refresh(now)
        key = self.ring.signing(now)
        fields: dict[str, Any] = {
            "k": key.id,
            "c": state.call,
            "b": state.binding,
            "r": state.rounds,
            "e": state.expires,
            "s": state.subject,
        }
        if state.nonce:
            fields["n"] = state.nonce
        if state.daemon:
            fields["d"] = state.daemon
        payload = _b64(json.dumps(fields, separators=(",", ":")).encode())
        return f"{payload}.{self._mac(key, payload)}"

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
        self.ring.refresh(now)
        claimed = self._issuer(payload)
        # A payload naming no key can only be checked against the key that signs now.
        key = self.ring.verifying(claimed, now) if claimed is not None else self.ring.signing(now)
        if key is None and claimed is not None and _KEY_ID.fullmatch(claimed) is not None:
            if self.ring.shared:
                raise RpcError.invalid_params(
                    f"requestState was signed with a key this daemon does not have "
                    f"({claimed}): every daemon must be given the same proto.stateKeyFile; "
                    "send the request again without requestState"
                )
            raise RpcError.invalid_params(
                "requestState was issued by another mcpx daemon process (this one "
                "restarted since, or the request went to another daemon); it cannot "
                "resume here: send the request again without requestState"
            )
        if key is None or not hmac.compare_digest(mac, self._mac(key, payload)):
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
                str(body.get("n", "")),
                str(body.get("d", "")),
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


def state_keys(settings: Settings, now: float) -> KeyRing:
    """
    The keys a daemon signs its C{requestState}s with: those of C{proto.stateKeyFile},
    read now (a L{StateKeyError}, a settings error, names the file), else one of this
    process.
    """
    ttl = settings.duration("proto.stateTTL")
    key_file = settings.string("proto.stateKeyFile")
    return KeyRing.from_file(key_file, ttl, now) if key_file else KeyRing.of_process(ttl)
