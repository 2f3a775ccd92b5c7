# -*- test-case-name: tests.server.test_sign_in_offers -*-
"""
A call to an OAuth server that needs a sign-in, from a host that declared URL-mode
elicitation: mcpx offers the sign-in through the host instead of failing
(L{mcpx.auth.host_signin}).

  - At 2025-11-25 the call fails with C{-32042} (URL elicitation required), its
    C{data.elicitations} the one URL elicitation; once the user has signed in the
    host is sent C{notifications/elicitation/complete} (where its connection can
    hear it), and its retry runs.
  - At 2026-07-28 the call is answered C{input_required} with the URL elicitation;
    the retry carrying the answer runs once the sign-in is done, and is asked the
    same URL again while it is not (a user who declines gets today's error).

Each principal is offered its own sign-in (L{mcpx.auth.signin}): the owner's host the
owner's, a host let in by an OAuth access token its subject's, for a server each
principal signs in to for itself.  A server whose sign-in is the owner's, shared with
everyone (C{"shared": true}), is offered to the owner's hosts alone.  A host that
declared no URL elicitation and any revision before 2025-11-25 get the error naming
how to sign in, as before.  Only C{mcpx_call} is covered: it names its server.
Every way a call runs is offered it the same way (L{SignInOffers.offering}, from the
pipeline L{mcpx.server.calling}), a 2026-07-28 call that may become a task of the tasks
extension among them.

An upstream's own C{-32042} to a C{tools/call} (a server that needs the user to open a
URL) reaches a 2025-11-25 host as it is; a revision without that code never sees it
(L{url_required_answer}): a 2026-07-28 host that declared URL elicitation is answered
C{input_required} with the server's URL elicitations, and its retry (mcpx's keys taken
out of C{inputResponses}) is the call made again, as a legacy host's retry after the
error would be; any other host gets a tool error naming the URLs to open.  The same
holds for an upstream's C{-32042} to a C{prompts/get} or C{resources/read}, except
that neither has a tool error: a 2026-07-28 host that did not declare URL elicitation
gets C{-32021} requiring it, a revision before 2025-11-25 C{-32603}, each with the
server's message and the URLs to open.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from twisted.logger import Logger

from mcpx.auth.caller import OWNER, principal_of
from mcpx.auth.host_signin import HostSignIns, Offer
from mcpx.auth.signin import whose
from mcpx.ops.host import OpHost
from mcpx.questions.relay import ELICITATION_COMPLETE
from mcpx.server.conn import Conn, Context
from mcpx.server.gateway_tools import CALL_TOOL
from mcpx.server.results import text_result
from mcpx.settings.servers import RemoteServer
from mcpx.spec.matrix import notification_in
from mcpx.spec.questions import ELICIT, may_ask
from mcpx.wire.errors import INTERNAL_ERROR, URL_ELICITATION_REQUIRED, RpcError, may_emit
from mcpx.wire.messages import without_member

log = Logger()

#: The key of the sign-in in a 2026-07-28 C{inputRequests}.
INPUT_KEY: Final = "mcpx-sign-in"

#: The keys of an upstream's URL elicitations (its C{-32042}) in a 2026-07-28
#: C{inputRequests}: this, then their index.
UPSTREAM_URL_KEY: Final = "mcpx-url-"


def _target(params: Mapping[str, Any]) -> str | None:
    """The server a C{tools/call} of C{mcpx_call} names, if it names one."""
    if params.get("name") != CALL_TOOL:
        return None
    arguments = params.get("arguments")
    server = arguments.get("server") if type(arguments) is dict else None
    return server if type(server) is str else None


def _principal(context: Context) -> str:
    """Whose sign-in the request's host may be offered: its subject's, else the owner's."""
    holder = context.holder
    return OWNER if holder is None else principal_of(holder)


def _offers_to(context: Context, server: RemoteServer) -> bool:
    """
    Whether the request's host can be offered a sign-in to C{server} as a URL
    elicitation: it declared URL elicitation, and the sign-in is its principal's own
    (a caller let in by an access token is never offered the owner's, which would then
    serve everyone).
    """
    principal = _principal(context)
    if whose(server, principal) != principal:
        return False
    if not may_ask(context.capabilities, ELICIT, {"mode": "url"}):
        return False
    return context.modern or may_emit(URL_ELICITATION_REQUIRED, context.revision)


#: What a call may be offered a sign-in for (L{SignInOffers.due}): the sign-ins, the
#: server's name and entry, the params without mcpx's own answer, and whether the user
#: declined.
Due = tuple[HostSignIns, str, RemoteServer, dict[str, Any], bool]


class SignInOffers:
    """Sign-ins offered to hosts that can show a URL, on a C{tools/call} of C{mcpx_call}."""

    def __init__(self, host: OpHost) -> None:
        self._host = host

    def _hosted(self) -> HostSignIns | None:
        return self._host.host_sign_ins

    def _server(self, name: str) -> RemoteServer | None:
        servers = self._host.servers
        found = servers.servers.get(name) if servers is not None else None
        return found if isinstance(found, RemoteServer) else None

    def due(self, context: Context, params: dict[str, Any]) -> Due | None:
        """
        What a call may be offered a sign-in for: the sign-ins, the server's name and
        entry, the params without mcpx's own answer, and whether the user declined; or
        C{None} for a call no sign-in is offered to.
        """
        name = _target(params)
        if name is None:
            return None
        # The cheapest test first: most calls are of servers no sign-in is for.
        server = self._server(name)
        if server is None:
            return None
        hosted = self._hosted()
        if hosted is None or not _offers_to(context, server):
            return None
        declined = False
        if context.modern:
            params, declined = _without_our_answer(params)
        return hosted, name, server, params, declined

    async def offering(
        self,
        conn: Conn,
        context: Context,
        due: Due,
        call: Callable[[dict[str, Any]], Awaitable[Mapping[str, Any]]],
    ) -> Mapping[str, Any]:
        """
        A C{tools/call} of C{mcpx_call} (L{mcpx.server.calling}) a sign-in may be
        offered to (L{due}): the sign-in offered before C{call} runs when one is
        needed, and after it when the server refused its token for good on the way;
        C{call}'s answer otherwise (its params without mcpx's own answer).
        """
        hosted, name, server, params, declined = due
        if not declined and hosted.needs(name, server, _principal(context)):
            offered = await self._offer(hosted, conn, context, name, server)
            if offered is not None:
                return offered
            return await call(params)
        result = await call(params)
        if (
            not declined
            and result.get("isError") is True
            and hosted.needs(name, server, _principal(context))
        ):
            # The server refused the token for good on the way (needs sign-in now).
            offered = await self._offer(hosted, conn, context, name, server)
            if offered is not None:
                return offered
        return result

    async def _offer(
        self,
        hosted: HostSignIns,
        conn: Conn,
        context: Context,
        name: str,
        server: RemoteServer,
    ) -> Mapping[str, Any] | None:
        """
        The offer, as the request's revision asks it (a result, or -32042 raised);
        C{None} when none could be made (discovery or registration failed: the call
        then says what it always said).
        """
        try:
            offer = await hosted.offer(name, server, _principal(context))
        except Exception as error:
            why = hosted.sign_ins.masker.mask(str(error))
            log.info("no sign-in to {server} offered: {error}", server=name, error=why)
            return None
        if context.modern:
            return {
                "resultType": "input_required",
                "inputRequests": {
                    INPUT_KEY: {
                        "method": ELICIT,
                        "params": {"mode": "url", "message": offer.message, "url": offer.url},
                    }
                },
            }
        _tell_when_done(offer, conn)
        raise RpcError(
            URL_ELICITATION_REQUIRED,
            f"{name} needs a sign-in: open the link to sign in, then try again",
            {
                "elicitations": [
                    {
                        "mode": "url",
                        "elicitationId": offer.elicitation_id,
                        "url": offer.url,
                        "message": offer.message,
                    }
                ]
            },
        )


def _without_our_answer(params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """
    C{params} without the answer to mcpx's sign-in (the upstream never asked it), and
    whether the user declined or cancelled it.
    """
    responses = params.get("inputResponses")
    if type(responses) is not dict or INPUT_KEY not in responses:
        return params, False
    ours = responses[INPUT_KEY]
    params = without_member(params, "inputResponses", INPUT_KEY)
    action = ours.get("action") if type(ours) is dict else None
    return params, action in ("decline", "cancel")


def without_upstream_urls(params: dict[str, Any]) -> dict[str, Any]:
    """
    A 2026-07-28 retry's C{params} without its answers to an upstream's URL
    elicitations (L{url_required_answer}): the upstream never asked them as questions.
    """
    responses = params.get("inputResponses")
    if type(responses) is not dict:
        return params
    for key in [key for key in responses if key.startswith(UPSTREAM_URL_KEY)]:
        params = without_member(params, "inputResponses", key)
    return params


def url_required_answer(
    error: RpcError, context: Context, method: str = "tools/call"
) -> Mapping[str, Any] | None:
    """
    An upstream's C{-32042} (URL elicitation required) to C{method}, for a host whose
    revision has no such code (every one but 2025-11-25): to a 2026-07-28 host that
    declared URL elicitation, C{input_required} with the URL elicitations; to any other,
    for a C{tools/call} a tool error with the server's message and the URLs to open,
    for another method an error of the host's revision saying the same (C{-32021}
    requiring URL elicitation at 2026-07-28, C{-32603} before 2025-11-25).  C{None}
    for any other error, or a revision that receives the error as it is.

    @raise RpcError: that error, for a method other than C{tools/call}.
    """
    if error.code != URL_ELICITATION_REQUIRED or may_emit(error.code, context.revision):
        return None
    data = error.data if type(error.data) is dict else {}
    listed = data.get("elicitations")
    wanted = [
        (str(one.get("message", "")), one["url"])
        for one in (listed if type(listed) is list else [])
        if type(one) is dict and one.get("mode", "url") == "url" and type(one.get("url")) is str
    ]
    if context.modern and wanted and may_ask(context.capabilities, ELICIT, {"mode": "url"}):
        return {
            "resultType": "input_required",
            "inputRequests": {
                f"{UPSTREAM_URL_KEY}{index}": {
                    "method": ELICIT,
                    "params": {"mode": "url", "message": message, "url": url},
                }
                for index, (message, url) in enumerate(wanted)
            },
        }
    lines = [f"the server needs you to open a URL, then call again: {error.message}"]
    lines.extend(f"{message}: {url}" if message else url for message, url in wanted)
    if method == "tools/call":
        return text_result("\n".join(lines), is_error=True)
    said = "; ".join(lines)
    urls = [{"message": message, "url": url} for message, url in wanted]
    if context.modern:
        refusal = RpcError.missing_client_capability({"elicitation": {"url": {}}})
        raise RpcError(refusal.code, said, {**refusal.data, "urls": urls})
    raise RpcError(INTERNAL_ERROR, said, {"code": "url_elicitation_required", "urls": urls})


def _tell_when_done(offer: Offer, conn: Conn) -> None:
    """Send C{conn} C{notifications/elicitation/complete} once the sign-in is done."""

    def tell() -> None:
        push = conn.push
        if push is None or conn.closed or conn.revision is None:
            return
        if notification_in(ELICITATION_COMPLETE, conn.revision):
            push(ELICITATION_COMPLETE, {"elicitationId": offer.elicitation_id})

    offer.wait(id(conn), tell)
