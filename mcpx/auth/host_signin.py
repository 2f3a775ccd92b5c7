# -*- test-case-name: tests.auth.test_host_signin -*-
"""
Sign-ins offered through the host (URL-mode elicitation): a call to an OAuth server
that needs a sign-in, from a host that can show its user a URL, is answered with the
authorization URL instead of an error, and the daemon receives the browser's redirect
itself.

Each offer has its own short-lived loopback listener (127.0.0.1, a free port), open
only while the offer waits (L{mcpx.auth.signin.PENDING_TTL} at most), which answers
C{GET /callback}.  The browser reaching it carries no credential of any kind: the
request is trusted by its C{state} alone, an unguessable value naming one offer, used
once (a second use, or any other value, is refused and changes nothing).  The exchange
is L{SignIns.finish}'s, as for C{mcpx auth login}; once it is done the hosts waiting
on the offer are told (C{notifications/elicitation/complete} where they can hear it).

One offer is kept per server and principal (the owner, or an access token's subject:
L{mcpx.auth.signin}): every host of that principal calling the server meanwhile is
given the same URL, and a retry before the user has finished gets that same URL again.
One principal's offer is never given to another's host, and its sign-in serves only that
principal's calls.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IListeningPort, IReactorTCP, IReactorTime
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from mcpx.auth.caller import OWNER
from mcpx.auth.signin import PENDING_TTL, SignIns, uses_oauth
from mcpx.settings.servers import RemoteServer

log = Logger()

#: The path of the redirect on an offer's listener.
CALLBACK_PATH: Final = "/callback"


def _page(title: str, text: str) -> bytes:
    return (
        "<!doctype html><meta charset=utf-8><title>mcpx</title>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>"
    ).encode()


@define(eq=False)
class Offer:
    """
    One sign-in offered to hosts.

    @ivar elicitation_id: what the hosts' URL elicitation is called (2025-11-25).
    @ivar url: the authorization URL the user opens.
    @ivar state: the C{state} of the authorization request: the only thing that lets a
        browser's redirect in.
    @ivar waiters: what to do once the sign-in is done (tell a host), by who waits:
        each once.
    @ivar principal: whose sign-in it is.
    """

    server: str
    elicitation_id: str
    url: str
    state: str
    port: IListeningPort
    expiry: IDelayedCall | None = None
    waiters: dict[object, Callable[[], object]] = field(factory=dict)
    principal: str = OWNER

    @property
    def message(self) -> str:
        return (
            f"Sign in to {self.server}: mcpx needs your permission to reach it. Open the "
            "link, sign in, then come back here."
        )

    def wait(self, who: object, done: Callable[[], object]) -> None:
        """
        Call C{done} once the sign-in is done (never, if it expires or fails); only the
        latest C{done} of each C{who}.
        """
        self.waiters[who] = done


class HostSignIns:
    """The sign-ins offered to hosts, at most one per server and principal."""

    def __init__(
        self,
        sign_ins: SignIns,
        reactor: IReactorTCP,
        clock: IReactorTime,
        *,
        on_signed_in: Callable[[str, str], Awaitable[object]] | None = None,
        ttl: float = PENDING_TTL,
    ) -> None:
        """
        @param on_signed_in: run with the server's name and the principal after a
            sign-in, before any host is told (the daemon restarts that principal's
            instance, which failed without a token).
        """
        self.sign_ins = sign_ins
        self.reactor = reactor
        self.clock = clock
        self.on_signed_in = on_signed_in
        self.ttl = ttl
        self._offers: dict[tuple[str, str], Offer] = {}

    def needs(self, name: str, server: object, principal: str = OWNER) -> bool:
        """
        Whether C{server} is an OAuth server C{principal}'s user must sign in to before
        it works for that principal.
        """
        if not isinstance(server, RemoteServer) or not uses_oauth(server):
            return False
        auth = server.auth
        if auth is not None and auth.oauth is not None and auth.oauth.client_credentials:
            return False
        entry = self.sign_ins.current(name, server, principal)
        return entry is None or entry.tokens is None or entry.needs_sign_in

    def pending(self, name: str, principal: str = OWNER) -> Offer | None:
        return self._offers.get((name, principal))

    async def offer(self, name: str, server: RemoteServer, principal: str = OWNER) -> Offer:
        """
        The offer of C{principal}'s sign-in to C{name}: the one waiting, or a new one
        (its listener started, the authorization URL built).

        @raise Exception: what L{SignIns.begin} raises (discovery or registration failed,
            or C{principal} has as many sign-ins waiting as it may).
        """
        key = (name, principal)
        waiting = self._offers.get(key)
        if waiting is not None:
            return waiting
        site: Any = Site(_Callback(self))
        port = self.reactor.listenTCP(0, site, interface="127.0.0.1")
        address: Any = port.getHost()
        redirect_uri = f"http://127.0.0.1:{address.port}{CALLBACK_PATH}"
        try:
            begun = await self.sign_ins.begin(name, server, redirect_uri, principal)
        except BaseException:
            port.stopListening()
            raise
        # Another call may have made an offer while this one was discovering.
        waiting = self._offers.get(key)
        if waiting is not None:
            port.stopListening()
            return waiting
        elicitation = "signin-" + secrets.token_urlsafe(12)
        offer = Offer(name, elicitation, begun["url"], begun["state"], port, principal=principal)
        offer.expiry = self.clock.callLater(self.ttl, self._drop, offer)
        self._offers[key] = offer
        return offer

    def close(self) -> None:
        """The daemon is stopping: every offer goes, and its listener with it."""
        for offer in list(self._offers.values()):
            self._drop(offer)

    def _drop(self, offer: Offer) -> None:
        if self._offers.get((offer.server, offer.principal)) is offer:
            del self._offers[offer.server, offer.principal]
        if offer.expiry is not None and offer.expiry.active():
            offer.expiry.cancel()
        offer.port.stopListening()

    def _claim(self, state: str) -> Offer | None:
        """The offer C{state} names, taken: it cannot be used again."""
        for offer in self._offers.values():
            if secrets.compare_digest(offer.state, state):
                del self._offers[offer.server, offer.principal]
                return offer
        return None

    async def returned(self, redirected_to: str) -> str:
        """
        The browser came back to C{redirected_to}: finish the sign-in its C{state}
        names, and tell the hosts waiting.

        @return: the server signed in to.
        @raise LookupError: no offer has this C{state} (forged, used, or expired).
        """
        state = dict(parse_qsl(urlsplit(redirected_to).query)).get("state", "")
        offer = self._claim(state) if state else None
        if offer is None:
            raise LookupError("no sign-in is waiting for this address (it was used or expired)")
        try:
            await self.sign_ins.finish(offer.server, redirected_to, offer.principal)
        finally:
            # The listener goes once this response is on its way.
            self.clock.callLater(0, self._drop, offer)
        if self.on_signed_in is not None:
            try:
                await self.on_signed_in(offer.server, offer.principal)
            except Exception:
                # The token is held; the next call starts the server again.
                log.failure("restarting {server} after its sign-in", server=offer.server)
        for done in offer.waiters.values():
            try:
                done()
            except Exception:
                log.failure("telling a host that {server} is signed in", server=offer.server)
        return offer.server


class _Callback(Resource):
    """An offer's listener: C{GET /callback?code=…&state=…}, nothing else."""

    isLeaf = True

    def __init__(self, hosted: HostSignIns) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.hosted = hosted

    def render_GET(self, request: Request) -> Any:
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        request.setHeader(b"cache-control", b"no-store")
        request.setHeader(b"referrer-policy", b"no-referrer")
        if request.path.decode("latin-1") != CALLBACK_PATH:
            request.setResponseCode(404)
            return _page("Not found", "This address only receives sign-ins.")
        returned = "http://127.0.0.1" + request.uri.decode("latin-1")
        gone: list[object] = []
        request.notifyFinish().addErrback(gone.append)

        def done(server: str) -> None:
            if gone:
                return
            request.write(
                _page(f"Signed in to {server}", "You can close this tab and go back to the host.")
            )
            request.finish()

        def failed(failure: Any) -> None:
            if gone:
                return
            request.setResponseCode(400)
            if failure.check(LookupError):
                text = str(failure.value)
            else:
                text = self.hosted.sign_ins.masker.mask(failure.getErrorMessage())
            request.write(_page("The sign-in did not complete", text))
            request.finish()

        finished = Deferred.fromCoroutine(self.hosted.returned(returned))
        finished.addCallbacks(done, failed).addErrback(
            lambda failure: log.failure("answering a sign-in's redirect", failure)
        )
        return NOT_DONE_YET
