# -*- test-case-name: tests.auth.test_signin -*-
"""
The daemon's OAuth sign-ins: one L{SignIns} per daemon, holding the token store, the
discoveries made, and the sign-ins under way.

A sign-in has two halves so that the browser can be anywhere: L{SignIns.begin}
discovers, registers and answers the authorization URL; L{SignIns.finish} takes the
URL the browser was redirected to, checks C{state} (and C{iss}), and exchanges the code.
A sign-in left unfinished expires after L{PENDING_TTL} seconds, and at most
L{MAX_PENDING} are kept for each principal (and L{SUBJECTS_PENDING} for every access
token's subject together), so nobody can make the daemon hold an unbounded number, and
no subject's sign-ins can take the owner's place.

Each principal signs in for itself: the owner (L{OWNER}: the unix sockets, and every
caller of a daemon without C{daemon.auth} C{oauth}), and each access token's subject,
by its caller identity (L{mcpx.auth.caller.principal_of}).  A subject's calls to a
server are made with its own tokens, unless the server's C{auth} says C{"shared": true}:
then with the owner's (L{whose}), which the owner alone signs in and out.

The upstream channel asks L{ServerCredentials} for its C{Authorization} header; a 401
from the server makes it rediscover (the authorization server may have moved) and
refresh on the next attempt.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from attrs import define, evolve, field, frozen
from twisted.internet.defer import Deferred, DeferredLock
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Protocol
from twisted.web.http_headers import Headers

from mcpx.auth.caller import OWNER, per_person
from mcpx.auth.flow import (
    REQUEST_TIMEOUT,
    Discovery,
    GrantRefused,
    NetworkError,
    OAuthClient,
    Registration,
    Requests,
)
from mcpx.auth.metadata import (
    PRIVATE_KEY_JWT,
    AuthorizationError,
    Challenge,
    Pkce,
    canonical_resource,
    check_assertion_method,
    check_callback,
    new_pkce,
    parse_challenge,
    select_scopes,
    token_auth_method,
)
from mcpx.auth.refresh import NeedsSignIn, Refresher, cure
from mcpx.auth.store import Entry, Key, TokenStore
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.servers import AuthType, RemoteServer
from mcpx.spec.revision import NEWEST, Revision

#: How long a sign-in may wait for its redirect, in seconds.
PENDING_TTL: Final = 600.0

#: The most sign-ins waiting for their redirect at once, by default
#: (C{daemon.pendingSignIns}).
MAX_PENDING: Final = 16

#: The most sign-ins every access token's subject together may have waiting at once
#: (each subject at most C{daemon.pendingSignIns}); the owner's are counted apart.
SUBJECTS_PENDING: Final = 256

#: How many step-ups mcpx asks for after a 403 C{insufficient_scope} with the same
#: challenged scopes (sign-ins for a user's server, new token requests for a
#: client-credentials one) before it stops asking and reports the refusal.
STEP_UP_LIMIT: Final = 2

#: The requests that find a server's challenge, in order: an initialize as any client
#: would send, then a request every server guards.
_PROBES: Final = (
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
    b'"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpx","version":"0"}}}',
    b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}',
)


def uses_oauth(server: object) -> bool:
    return (
        isinstance(server, RemoteServer)
        and server.auth is not None
        and server.auth.type is AuthType.OAUTH
    )


def _client_credentials(server: RemoteServer) -> bool:
    auth = server.auth
    return auth is not None and auth.oauth is not None and auth.oauth.client_credentials


def whose(server: object, principal: str) -> str:
    """The principal whose tokens C{principal}'s requests to C{server} carry."""
    return principal if per_person(server) else OWNER


@frozen(repr=False)
class _Pending:
    server: str
    principal: str
    discovery: Discovery
    client: Registration
    pkce: Pkce
    redirect_uri: str
    scopes: tuple[str, ...]
    started: float


@define(eq=False, slots=False)
class SignIns:
    """
    Every OAuth server's tokens and sign-ins, for one daemon.

    @ivar _grants: one client-credentials token request at a time per server.
    """

    http: Requests
    clock: IReactorTime
    store: TokenStore
    masker: SecretMasker
    max_pending: int = field(default=MAX_PENDING, kw_only=True)
    client: OAuthClient = field(init=False)
    refresher: Refresher = field(init=False)
    _discoveries: dict[str, Discovery] = field(factory=dict, init=False)
    _challenges: dict[str, Challenge] = field(factory=dict, init=False)
    _pending: dict[str, _Pending] = field(factory=dict, init=False)
    _grants: dict[str, DeferredLock] = field(factory=dict, init=False)
    #: Step-ups asked for, by server, principal and the challenged scopes: how many, and a digest
    #: of the token the last one was about (the 403s one token gets count once).
    _step_ups: dict[tuple[str, str, frozenset[str]], tuple[int, str]] = field(
        factory=dict, init=False
    )
    #: The scopes a client-credentials server's next token request asks for.
    _required: dict[str, tuple[str, ...]] = field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        self.client = OAuthClient(self.http, self.clock)
        self.refresher = Refresher(self.store, self.client, self.clock)
        self.masker.add_values(self.store.secrets())

    def _learn_secrets(self) -> None:
        self.masker.add_values(self.store.secrets())

    def credentials(
        self, name: str, server: RemoteServer, principal: str = OWNER
    ) -> ServerCredentials:
        return ServerCredentials(self, name, server, principal)

    def credentials_for(
        self, name: str, server: RemoteServer, principal: str = OWNER
    ) -> ServerCredentials | None:
        """
        The credentials C{principal}'s channel to a server that uses OAuth presents;
        C{None} for any other server.
        """
        return self.credentials(name, server, principal) if uses_oauth(server) else None

    # Finding where to sign in

    async def _challenge(self, server: RemoteServer) -> Challenge | None:
        """
        What the server says to requests without a token: an C{initialize}, and if a
        server lets that through (some guard only later methods), a C{tools/list}.
        """
        for probe in _PROBES:
            challenge = await self._probe(server, probe)
            if challenge is not None:
                return challenge
        return None

    async def _probe(self, server: RemoteServer, body: bytes) -> Challenge | None:
        async def probe() -> Any:
            response = await self.http.post(
                server.request_url(),
                data=body,
                headers=Headers(
                    {
                        "Content-Type": ["application/json"],
                        "Accept": ["application/json, text/event-stream"],
                    }
                ),
                # As every request to the server (mcpx.upstream.http): not followed.
                allow_redirects=False,
            )
            # The body is not needed; the connection is let go.
            response.deliverBody(Protocol())
            return response

        try:
            response = await Deferred.fromCoroutine(probe()).addTimeout(REQUEST_TIMEOUT, self.clock)
        except Exception as error:
            raise NetworkError(f"{server.name} could not be reached: {error}") from error
        if response.code not in (401, 403):
            return None
        return parse_challenge(
            [v.decode("latin-1") for v in response.headers.getRawHeaders(b"www-authenticate", [])]
        )

    async def discover(self, name: str, server: RemoteServer) -> Discovery:
        """
        Where the server's authorization server is: RFC 9728 metadata from its challenge
        or the well-knowns, and failing that the 2025-03-26 rules (the authorization
        server at the server's origin).  The newest revision's checks apply throughout
        (C{iss}, issuer equality, C{application_type}): they only refuse what is wrong.
        """
        challenge = self._challenges.get(name) or await self._challenge(server)
        if challenge is not None:
            self._challenges[name] = challenge
        # PKCE guards the browser's code; the client-credentials grant has none.
        pkce = not _client_credentials(server)
        try:
            found = await self.client.discover(
                server.url, challenge, Revision.V2026_07_28, pkce=pkce
            )
        except AuthorizationError as error:
            if "publishes no protected-resource metadata" not in str(error):
                raise
            found = await self.client.discover(
                server.url, challenge, Revision.V2025_03_26, pkce=pkce
            )
        self._discoveries[name] = found
        return found

    # Signing in

    def _room_for(self, principal: str) -> None:
        """
        Refuse a sign-in C{principal} may not begin now: it has L{max_pending} waiting,
        or (for a subject) every subject together has L{SUBJECTS_PENDING}.

        @raise AuthorizationError: saying which bound was reached.
        """
        self._expire_pending()
        mine = sum(1 for pending in self._pending.values() if pending.principal == principal)
        if mine >= self.max_pending:
            raise AuthorizationError(
                f"{self.max_pending} sign-ins are already waiting for their browser "
                f"(daemon.pendingSignIns); finish them or wait {PENDING_TTL:g}s for them "
                "to expire"
            )
        subjects = sum(1 for pending in self._pending.values() if pending.principal != OWNER)
        if principal != OWNER and subjects >= SUBJECTS_PENDING:
            raise AuthorizationError(
                f"{SUBJECTS_PENDING} sign-ins of other callers are waiting for their browser; "
                f"try again within {PENDING_TTL:g}s"
            )

    async def begin(
        self, name: str, server: RemoteServer, redirect_uri: str, principal: str = OWNER
    ) -> dict[str, Any]:
        """
        Start C{principal}'s sign-in: the URL to open, and the C{state} that identifies
        it.  Its waiting counts against C{principal}'s L{max_pending} alone.
        """
        self._room_for(principal)
        discovery = await self.discover(name, server)
        auth = server.auth
        assert auth is not None and auth.oauth is not None
        key = self._key(name, discovery, principal)
        entry = self.store.get(key) or Entry(key)
        client = entry.registration
        if client is None or client.issuer != discovery.server.issuer:
            client = await self.client.register(
                discovery,
                redirect_uri,
                client_id=auth.oauth.client_id,
                client_secret=auth.secret.reveal() or None,
                metadata_url=auth.oauth.metadata_url,
            )
            self.store.put(evolve(entry, registration=client))
            self._learn_secrets()
        previous = entry.tokens.scopes if entry.tokens is not None else ()
        scopes = select_scopes(
            self._challenges.get(name),
            discovery.protected,
            discovery.server,
            configured=auth.oauth.scopes,
            previous=previous,
            required=entry.required_scopes,
            revision=discovery.revision,
        )
        pkce = new_pkce()
        state = secrets.token_urlsafe(24)
        self._pending[state] = _Pending(
            name, principal, discovery, client, pkce, redirect_uri, scopes, self.clock.seconds()
        )
        url = self.client.authorization_url(
            discovery,
            client,
            redirect_uri=redirect_uri,
            state=state,
            code_challenge=pkce.challenge,
            scopes=scopes,
        )
        return {"url": url, "state": state, "issuer": discovery.server.issuer}

    async def finish(
        self, name: str, redirected_to: str, principal: str | None = OWNER
    ) -> dict[str, Any]:
        """
        Finish a sign-in with the URL the browser was sent back to: one C{principal}
        began (whoever began it when C{None}: the browser's redirect to a listener of
        the daemon's own, which only the C{state} lets in).
        """
        self._expire_pending()
        params = dict(parse_qsl(urlsplit(redirected_to).query))
        pending = self._pending.get(params.get("state", ""))
        if (
            pending is None
            or pending.server != name
            or (principal is not None and pending.principal != principal)
        ):
            raise AuthorizationError(
                f"no sign-in to {name} is waiting for this redirect (its state is unknown "
                "or expired); run `mcpx auth login " + name + "` again"
            )
        del self._pending[params["state"]]
        code = check_callback(
            params,
            state=params["state"],
            server=pending.discovery.server,
            revision=pending.discovery.revision,
        )
        tokens = await self.client.exchange(
            pending.discovery,
            pending.client,
            code=code,
            verifier=pending.pkce.verifier,
            redirect_uri=pending.redirect_uri,
        )
        if not tokens.scopes:
            tokens = evolve(tokens, scopes=pending.scopes)
        key = self._key(name, pending.discovery, pending.principal)
        self.store.put(Entry(key, pending.client, tokens))
        self._learn_secrets()
        self._challenges.pop(name, None)
        return self.describe(name, pending.principal)

    def _expire_pending(self) -> None:
        now = self.clock.seconds()
        for state, pending in list(self._pending.items()):
            if now - pending.started > PENDING_TTL:
                del self._pending[state]

    def _key(self, name: str, discovery: Discovery, principal: str = OWNER) -> Key:
        resource = discovery.resource or canonical_resource(discovery.server_url)
        return Key(name, discovery.server.issuer, resource, principal)

    # Using the tokens

    def current(self, name: str, server: RemoteServer, principal: str = OWNER) -> Entry | None:
        """
        The entry whose tokens C{principal}'s requests reach the server with: its
        latest at its URL, of the principal L{whose} tokens they carry.
        """
        principal = whose(server, principal)
        discovery = self._discoveries.get(name)
        if discovery is not None:
            return self.store.get(self._key(name, discovery, principal))
        resource = canonical_resource(server.url)
        for entry in self.store.entries(name, principal):
            if entry.key.resource == resource and entry.tokens is not None:
                return entry
        return None

    async def authorization(self, name: str, server: RemoteServer, principal: str = OWNER) -> str:
        """The C{Authorization} header value of C{principal}'s requests to the server."""
        if _client_credentials(server):
            lock = self._grants.setdefault(name, DeferredLock())
            await lock.acquire()
            try:
                return "Bearer " + await self._client_credentials(name, server)
            finally:
                lock.release()
        entry = self.current(name, server, principal)
        if entry is None or entry.tokens is None:
            raise NeedsSignIn(name, owner=whose(server, principal) == OWNER)
        if entry.needs_sign_in:
            owner = entry.key.principal == OWNER
            if entry.required_scopes:
                raise NeedsSignIn(name, _wants_scopes(entry), owner=owner)
            raise NeedsSignIn(name, "its authorization was revoked or has expired", owner=owner)
        expires_at = entry.tokens.expires_at
        if expires_at is None or expires_at - self.refresher.leeway > self.clock.seconds():
            return "Bearer " + entry.tokens.access_token
        discovery = self._discoveries.get(name) or await self.discover(name, server)
        token = await self.refresher.access_token(entry.key, discovery)
        self._learn_secrets()
        return "Bearer " + token

    async def _client_credentials(self, name: str, server: RemoteServer) -> str:
        """
        The daemon's own token for a C{client_credentials} server: the one held while
        it is fresh, else a new one from the token endpoint (no refresh token needed).
        """
        entry = self.current(name, server)
        if entry is not None and entry.tokens is not None:
            expires_at = entry.tokens.expires_at
            if expires_at is None or expires_at - self.refresher.leeway > self.clock.seconds():
                return entry.tokens.access_token
        auth = server.auth
        assert auth is not None and auth.oauth is not None and auth.oauth.client_id is not None
        discovery = self._discoveries.get(name) or await self.discover(name, server)
        key = auth.oauth.private_key
        if key is not None:
            check_assertion_method(discovery.server, key.algorithm)
            client = Registration(
                discovery.server.issuer, auth.oauth.client_id, None, PRIVATE_KEY_JWT, key
            )
        else:
            client = Registration(
                discovery.server.issuer,
                auth.oauth.client_id,
                auth.secret.reveal(),
                token_auth_method(discovery.server, True),
            )
        scopes = select_scopes(
            self._challenges.get(name),
            discovery.protected,
            discovery.server,
            configured=auth.oauth.scopes,
            previous=(),
            required=self._required.get(name, ()),
            revision=discovery.revision,
        )
        try:
            tokens = await self.client.client_credentials(discovery, client, scopes)
        except GrantRefused as refused:
            raise AuthorizationError(
                f"{discovery.server.issuer} refused the client credentials of {name} "
                f"({refused}); check its clientId and "
                + ("privateKeyFile" if key is not None else "clientSecret")
            ) from refused
        if not tokens.scopes:
            tokens = evolve(tokens, scopes=scopes)
        self.store.put(Entry(self._key(name, discovery), client, tokens))
        self._learn_secrets()
        return tokens.access_token

    def unauthorized(
        self, name: str, challenge: Challenge | None, principal: str | None = None
    ) -> None:
        """
        The server refused the token (C{principal}'s, every one's when C{None}): the
        discovery is made again and the token refreshed before the next attempt.
        """
        self._discoveries.pop(name, None)
        if challenge is not None:
            self._challenges[name] = challenge
        for entry in self.store.entries(name, principal):
            if entry.tokens is not None and entry.tokens.expires_at != 0.0:
                self.store.put(evolve(entry, tokens=evolve(entry.tokens, expires_at=0.0)))

    def insufficient_scope(
        self,
        name: str,
        server: RemoteServer,
        challenge: Challenge,
        revision: Revision | None = None,
        principal: str = OWNER,
    ) -> str:
        """
        The server refused the token for lack of scope (403 C{insufficient_scope}): the
        scopes a step-up asks for are recorded (at 2026-07-28 the union of the token's
        scopes and the challenged ones; before, the challenged ones), and the next
        sign-in, or for a client-credentials server the next token request, asks for
        them.  After L{STEP_UP_LIMIT} step-ups for the same challenged scopes mcpx
        stops asking.  The hint for the call's error.

        @param revision: the revision the server speaks, if known (recorded for the
            hint only: every revision gets the union).
        """
        speaks = (revision or NEWEST).value
        challenged = challenge.scope or ()
        entry = self.current(name, server, principal)
        held = entry.tokens.scopes if entry is not None and entry.tokens is not None else ()
        # 2026-07-28 asks for the union; 2025-11-25 for the challenged scopes, which the
        # union contains: keeping the held ones too keeps working what worked (a token
        # with the challenged scopes alone fails the operations that needed the others).
        required = tuple(dict.fromkeys((*held, *challenged)))
        missing = [s for s in challenged if s not in held] or list(challenged)
        wanted = " ".join(missing) or "(the server named none)"
        signs_in = whose(server, principal)
        attempt = (name, signs_in, frozenset(challenged))
        token = entry.tokens.access_token if entry is not None and entry.tokens else ""
        digest = hashlib.sha256(token.encode()).hexdigest()
        count, about = self._step_ups.get(attempt, (0, ""))
        if about != digest:
            # Another token refused: one more step-up (every request of one token that
            # is refused counts once).
            count += 1
            self._step_ups[attempt] = (count, digest)
        if count > STEP_UP_LIMIT:
            return (
                f"{name} still refuses the token for lack of scope ({wanted}) after "
                f"{STEP_UP_LIMIT} step-ups asking for it; mcpx stops asking: the account "
                "or client may not be allowed these scopes at its authorization server"
            )
        self._discoveries.pop(name, None)
        if signs_in == OWNER:
            # The scopes the owner's next sign-in asks for; a subject's are kept in its
            # own entry (required_scopes), and ask nothing of anyone else's.
            self._challenges[name] = challenge
        if _client_credentials(server):
            self._required[name] = required
            for held_entry in self.store.entries(name):
                if held_entry.tokens is not None:
                    tokens = evolve(held_entry.tokens, expires_at=0.0)
                    self.store.put(evolve(held_entry, tokens=tokens))
            return (
                f"{name} refused the token for lack of scope ({wanted}); the next call "
                f"asks for a new token with the scopes {' '.join(required)} "
                f"(step-up {count} of {STEP_UP_LIMIT})"
            )
        if entry is not None:
            self.store.put(evolve(entry, needs_sign_in=True, required_scopes=required))
        return (
            f"{name} refused the token for lack of scope ({wanted}); "
            f"{cure(name, whose(server, principal) == OWNER)} to sign in with the scopes "
            f"{' '.join(required)} (step-up {count} of {STEP_UP_LIMIT}, {speaks})"
        )

    # Showing and forgetting

    def describe(self, name: str, principal: str = OWNER) -> dict[str, Any]:
        """One server's sign-in state of C{principal}, never a token."""
        entries = [e for e in self.store.entries(name, principal) if e.tokens is not None]
        if not entries:
            return {"server": name, "state": "signed_out"}
        entry = entries[0]
        assert entry.tokens is not None
        shown: dict[str, Any] = {
            "server": name,
            "state": "needs_sign_in" if entry.needs_sign_in else "signed_in",
            "issuer": entry.key.issuer,
            "resource": entry.key.resource,
            "scopes": list(entry.tokens.scopes),
            "expires_at": entry.tokens.expires_at,
            "refreshable": entry.tokens.refresh_token is not None,
        }
        if entry.required_scopes:
            shown["required_scopes"] = list(entry.required_scopes)
        refused = sorted(
            {
                scope
                for (server, who, scopes), (count, _) in self._step_ups.items()
                if server == name and who == principal and count > STEP_UP_LIMIT
                for scope in scopes
            }
        )
        if refused:
            shown["scopes_refused"] = refused
        return shown

    def status(self, names: Iterable[str], principal: str = OWNER) -> list[dict[str, Any]]:
        return [self.describe(name, principal) for name in names]

    async def logout(self, name: str, principal: str = OWNER) -> tuple[int, list[str]]:
        """
        Forget C{principal}'s tokens and clients of the server, then revoke the tokens
        (RFC 7009) where the authorization server offers it: how many entries were
        dropped, and a warning for each revocation that failed.  The tokens are
        forgotten first, so a revocation that fails or never answers cannot keep them.
        Another principal's sign-in is left as it was.
        """
        discovery = self._discoveries.get(name)
        if principal == OWNER:
            self._discoveries.pop(name, None)
            self._challenges.pop(name, None)
            self._required.pop(name, None)
        for attempt in [a for a in self._step_ups if a[:2] == (name, principal)]:
            del self._step_ups[attempt]
        dropped = self.store.forget(name, principal)
        warnings: list[str] = []
        for entry in dropped:
            if entry.tokens is None or entry.registration is None:
                continue
            try:
                server = (
                    discovery.server
                    if discovery is not None and discovery.server.issuer == entry.key.issuer
                    else await self.client.authorization_server(entry.key.issuer)
                )
                if server is None or server.revocation_endpoint is None:
                    continue
                # The refresh token first: revoking it ends the grant at most servers.
                held = [(entry.tokens.refresh_token, "refresh_token")]
                held.append((entry.tokens.access_token, "access_token"))
                for token, hint in held:
                    if token is not None:
                        await self.client.revoke(server, entry.registration, token, hint)
            except (AuthorizationError, NetworkError) as error:
                reason = self.masker.mask(str(error))
                warnings.append(
                    f"{entry.key.issuer} did not revoke the tokens ({reason}); they are "
                    "forgotten here but may stay valid until they expire"
                )
        return len(dropped), warnings


class ServerCredentials:
    """What one upstream channel (of one principal's, L{whose}) asks of the sign-ins."""

    def __init__(
        self, sign_ins: SignIns, name: str, server: RemoteServer, principal: str = OWNER
    ) -> None:
        self.sign_ins = sign_ins
        self.name = name
        self.server = server
        self.principal = whose(server, principal)

    async def authorization(self) -> str:
        return await self.sign_ins.authorization(self.name, self.server, self.principal)

    def unauthorized(self, www_authenticate: list[str], revision: Revision | None = None) -> str:
        """
        Note a 401 or 403 (from a server speaking C{revision}, if known); the hint that
        goes into the error.
        """
        challenge = parse_challenge(www_authenticate)
        if challenge is not None and challenge.error == "insufficient_scope":
            return self.sign_ins.insufficient_scope(
                self.name, self.server, challenge, revision, self.principal
            )
        self.sign_ins.unauthorized(self.name, challenge, self.principal)
        return "the server refused the token; if this persists, " + cure(
            self.name, self.principal == OWNER
        )


def _wants_scopes(entry: Entry) -> str:
    held = entry.tokens.scopes if entry.tokens is not None else ()
    missing = [s for s in entry.required_scopes if s not in held] or list(entry.required_scopes)
    return f"it asks for more scopes (missing: {' '.join(missing)})"
