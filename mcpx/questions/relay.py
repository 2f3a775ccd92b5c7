# -*- test-case-name: tests.questions.test_relay -*-
"""
Where an upstream server's question goes: the calling client first, the broker always.

Every question becomes a broker record.  It is put to the client that made the call
when the call is known (the server asked inside its own request's result, or the pool
says one call owns the connection it arrived on), that client declared it can answer
that kind, and mcpx can reach it; otherwise it waits in the broker for C{mcpx elicit},
C{/v1/questions} or any other consumer, until its deadline answers C{cancel}.  A
C{roots/list} nobody can be asked is answered by mcpx itself, with the configured roots
(C{proto.roots}): never with another host's.

While a question is pending, the C{pool.callTimeout} clocks of the requests on that
connection stop: a person answering is not the server being slow.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import PurePosixPath
from typing import Any, Final, Protocol

from twisted.internet.defer import CancelledError, Deferred, race
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx import tracing
from mcpx.call import Asker, Call, ClientUnreachable
from mcpx.questions.broker import Broker
from mcpx.questions.forms import check_content
from mcpx.questions.record import ROUTE_BROKER, ROUTE_CLIENT, QuestionState
from mcpx.spec.questions import CAPABILITY_FOR, ELICIT, LIST_ROOTS, may_ask
from mcpx.upstream.handlers import NotificationSink, UpstreamHandlers
from mcpx.wire.errors import RpcError

ELICITATION_COMPLETE = "notifications/elicitation/complete"

Owner = Callable[[str, str], "Call | None"]
Hold = Callable[[str, str], Callable[[], None]]
Candidates = Callable[[str, str], Sequence["Call | None"]]
#: Whether anyone watches the broker for C{server}'s questions now (L{Relay}).
#: Whether anyone watches the broker for a server's questions asked for an owner's call.
Watched = Callable[[str, "str | None"], bool]

#: How recently a C{GET /v1/questions} must have listed the questions for the broker to
#: count as watched (C{mcpx elicit} and a call's watch poll far more often).
WATCHED_WITHIN: Final = 10.0

#: An elicitation's answers, the only words of an answer a question's span records.
_ACTIONS: Final = frozenset(("accept", "decline", "cancel"))

#: The client to ask a C{roots/list} that belongs to no call: (server, scope key) to an
#: L{Asker}, or C{None} when no client that declared roots uses that server.
RootsSource = Callable[[str, str], "Asker | None"]


class LoneRequest(Protocol):
    """
    The pool's request made for nobody that was alone in flight when its server asked
    (L{mcpx.pool.attribution.NobodysRequest}): the question is its own.
    """

    @property
    def id(self) -> str:
        """The C{call_id} its questions are recorded with."""
        ...

    def on_end(self, withdraw: Callable[[], None]) -> None:
        """Have C{withdraw} called when the request ends."""
        ...


#: The pool's lone request made for nobody on (server, scope key), if there is one.
LoneSource = Callable[[str, str], "LoneRequest | None"]


def _nobody(server: str, scope_key: str) -> None:
    return None


def _no_hold(server: str, scope_key: str) -> Callable[[], None]:
    return _released


def _released() -> None:
    pass


log = Logger()

#: How one side of a race ended: its result, or its failure (a failure ends it too).
_Ended = list[Any]


def _settled(side: Deferred[Any]) -> Deferred[_Ended]:
    """C{side}, succeeding however it ends, so a failure wins a race as an answer does."""
    return side.addBoth(lambda ended: [ended])


def _winner(won: tuple[int, _Ended]) -> Any:
    """The result (or the failure) of the side that won a race of L{_settled} sides."""
    return won[1][0]


def rewritten(server: str, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The question as mcpx passes it on: an elicitation names the server that asks."""
    shown = dict(params)
    if method == ELICIT:
        message = shown.get("message")
        if isinstance(message, str):
            shown["message"] = f"{server} (via mcpx) asks: {message}"
    return shown


def unfit_answer(method: str, params: Mapping[str, Any], result: object) -> str | None:
    """
    Why a client's answer to an elicitation cannot go upstream (its form content does
    not fit the requested schema), or C{None}.  Other answers go as they are.
    """
    if method != ELICIT or params.get("mode", "form") != "form":
        return None
    if not isinstance(result, Mapping) or result.get("action") != "accept":
        return None
    return check_content(params.get("requestedSchema") or {}, result.get("content", {}))


def own_root(root: str) -> dict[str, str]:
    """One of C{proto.roots} as a C{Root}: a directory becomes its C{file://} URI."""
    if "://" in root:
        uri = root
        name = root.rstrip("/").rsplit("/", 1)[-1]
    else:
        # Resolved once, when the daemon starts: relative to the directory it started in.
        path = PurePosixPath(os.path.abspath(os.path.expanduser(root)))
        uri = path.as_uri()
        name = path.name
    return {"uri": uri, "name": name} if name else {"uri": uri}


def unwatched_refusal(server: str, method: str) -> RpcError:
    """
    The error a server's question no client can be asked gets while nobody watches the
    broker: C{-32600}, as the MCP SDKs' clients refuse a request for a capability they
    lack ("Elicitation not supported"), with what mcpx knows.
    """
    kind = CAPABILITY_FOR[method]
    return RpcError.invalid_request(
        f"{kind.capitalize()} not supported: no client connected to mcpx can answer "
        f"{server}'s {method} (the calling client did not declare {kind}, or the question "
        "could not be tied to its call) and nobody watches mcpx's questions "
        "(proto.brokerWhenUnwatched is refuse)"
    )


class Relay:
    """
    Routes the questions of every upstream instance.

    @ivar broker: keeps every question, and answers those no client takes.
    """

    def __init__(
        self,
        broker: Broker,
        clock: IReactorTime,
        *,
        owner: Owner = _nobody,
        hold: Hold = _no_hold,
        native: bool = True,
        client_wait: float = 600.0,
        roots: Sequence[str] = (),
        candidates: Candidates | None = None,
        roots_source: RootsSource | None = None,
        lone: LoneSource | None = None,
        watched: Watched | None = None,
    ) -> None:
        """
        @param owner: the pool's attribution: the one caller on (server, scope key);
            nobody's without it.
        @param hold: pauses the pool's call deadlines on (server, scope key); see
            L{mcpx.pool.pool.Pool.hold_deadlines}.
        @param native: C{proto.native}: put questions to calling clients at all.
        @param client_wait: how long a question put to a client may wait for it; the
            broker's own deadline bounds the others.
        @param roots: C{proto.roots}: mcpx's own answer to a C{roots/list} no client can
            be asked (directories or C{file://} URIs).
        @param candidates: the pool's callers in flight on (server, scope key): told
            when a question that may be theirs waits in the broker for want of knowing.
        @param roots_source: the client whose roots a C{roots/list} outside any one
            call gets: the instance's own client, for a C{client}-scoped server; nobody
            for a C{shared} one (L{mcpx.server.roots.Roots.source}).
        @param lone: the pool's request made for nobody (its client declared nothing
            it could be asked) alone in flight on (server, scope key): a question with
            no caller to put it to is still named after it, and withdrawn when it ends.
        @param watched: given (C{proto.brokerWhenUnwatched: refuse}), whether anyone
            watches the broker for a server's questions: an elicitation or sampling
            request no client can be asked is refused at once while nobody does.
        """
        self.broker = broker
        self._clock = clock
        self._owner = owner
        self._hold = hold
        self._native = native
        self._client_wait = client_wait
        self._roots = {"roots": [own_root(root) for root in roots]}
        self._candidates = candidates
        self.roots_source = roots_source
        self._lone = lone
        self._watched = watched
        #: The clients asked url-mode elicitations, by (server, elicitationId): told when
        #: the server says the elicitation completed.
        self._url_asks: dict[tuple[str, str], Asker] = {}

    def handlers(
        self, server: str, scope_key: str, notification: NotificationSink | None = None
    ) -> UpstreamHandlers:
        """The handlers of the instance serving (C{server}, C{scope_key})."""

        async def relay(
            method: str, params: Mapping[str, Any], call: Call | None, key: str | None
        ) -> Mapping[str, Any]:
            if not tracing.on():
                return await self.ask(server, scope_key, method, params, call=call, key=key)
            # A span from the question to its answer, a child of the call it is asked for.
            owner = call if call is not None else self._owner(server, scope_key)
            with tracing.span(
                f"mcpx.question {method}",
                {"mcpx.server": server, "mcp.method.name": method},
                parent=tracing.recall(owner),
            ) as span:
                answer = await self.ask(server, scope_key, method, params, call=call, key=key)
                action = answer.get("action")
                tracing.ended(
                    span, "mcpx.question.action", action if action in _ACTIONS else "answered"
                )
                return answer

        def heard(method: str, params: Mapping[str, Any] | None) -> None:
            if method == ELICITATION_COMPLETE:
                self.completed(server, params or {})
            if notification is not None:
                notification(method, params)

        return UpstreamHandlers(relay=relay, notification=heard)

    def completed(self, server: str, params: Mapping[str, Any]) -> bool:
        """
        C{server} says a url-mode elicitation completed: tell the client that was asked
        it, if one was and it can hear it.

        @return: whether a client was told.
        """
        elicitation = params.get("elicitationId")
        if not isinstance(elicitation, str):
            return False
        asker = self._url_asks.pop((server, elicitation), None)
        if asker is None:
            return False
        return asker.tell(ELICITATION_COMPLETE, {"elicitationId": elicitation})

    def _remember_url_ask(self, server: str, shown: Mapping[str, Any], asker: Asker) -> None:
        elicitation = shown.get("elicitationId")
        if shown.get("mode") != "url" or not isinstance(elicitation, str):
            return
        key = (server, elicitation)
        self._url_asks[key] = asker
        # Remembered as long as a question may wait for a client, then forgotten.
        self._clock.callLater(self._client_wait, self._url_asks.pop, key, None)

    def _call(self, server: str, scope_key: str, given: Call | None) -> Call | None:
        found = given if given is not None else self._owner(server, scope_key)
        if found is not None:
            return found
        if given is None and self._lone is not None:
            lone = self._lone(server, scope_key)
            if lone is not None:
                # Its client can be asked nothing, but the question is certainly this
                # request's: the broker names it so, and it goes when the request does
                # (the server answered cancel, as for any call's withdrawn question).
                stand_in = Call(lone.id, {})
                lone.on_end(stand_in.withdraw)
                return stand_in
        return None

    async def ask(
        self,
        server: str,
        scope_key: str,
        method: str,
        params: Mapping[str, Any],
        *,
        call: Call | None = None,
        key: str | None = None,
        own: bool = False,
    ) -> dict[str, Any]:
        """
        Get an answer to one question from C{server}'s instance for C{scope_key}.

        @param call: the call it came with: the server asked inside a result, or on
            the reply stream of a request made for that call (Streamable HTTP).
        @param key: its C{inputRequests} key, if it was one.
        @param own: mcpx itself asks (the policy's confirmations, L{mcpx.policy}): its
            words are shown as they are, not as the server's.
        @return: the result to send the server.
        @raise mcpx.wire.errors.RpcError: the client's error, or a declined sampling or
            roots question.
        """
        attributed = call is None
        call = self._call(server, scope_key, call)
        if call is not None:
            call.question_asked()
        shown = dict(params) if own else rewritten(server, method, params)
        ahead = call.take_held(key) if call is not None else None
        if ahead is not None and not isinstance(ahead, Mapping):
            # An answer sent ahead that is not even an object is no answer: it is asked.
            ahead = None
        native = (
            self._native
            and call is not None
            and call.asker is not None
            and may_ask(call.capabilities, method, shown)
        )
        if call is not None and (ahead is not None or native):
            return await self._from_client(
                server,
                scope_key,
                method,
                shown,
                call=call,
                key=key,
                ahead=ahead,
                attributed=attributed,
            )
        if method == LIST_ROOTS and self._native and self.roots_source is not None:
            # Asked outside one call (or by a call whose client has none to give), an
            # instance that is one client's own gets that client's roots; the source
            # names nobody for a shared one, which gets mcpx's own (proto.roots) below:
            # never the roots of some other host that happens to use it.
            source = self.roots_source(server, scope_key)
            if source is not None:
                stand_in = Call("", {"roots": {}}, asker=source)
                return await self._from_client(
                    server, scope_key, method, shown, call=stand_in, key=None, ahead=None
                )
        if (
            call is not None
            and call.strict
            and method != LIST_ROOTS
            and not may_ask(call.capabilities, method, shown)
        ):
            # A 2026-07-28 client must be told what it lacks (-32021), not kept waiting
            # on a broker it may never know of. Roots are not its to give: a server
            # that asks for them mid-call (server-everything does, 350 ms after it
            # starts) gets mcpx's own below, and the call goes on.
            refusal = RpcError.missing_client_capability({CAPABILITY_FOR[method]: {}})
            call.refused = refusal
            raise refusal
        if (
            not own
            and method != LIST_ROOTS
            and self._watched is not None
            and not self._watched(server, call.owner if call is not None else None)
        ):
            raise unwatched_refusal(server, method)
        question, answered = self.broker.ask(
            server=server,
            scope_key=scope_key,
            method=method,
            params=shown,
            route=ROUTE_BROKER,
            call_id=call.id if call is not None else None,
            owner=call.owner if call is not None else None,
        )
        if call is not None and call.withdrawn:
            # Asked for a call already given up on: withdrawn before anyone sees it.
            self._withdraw(question.id)
        if method == LIST_ROOTS and question.pending:
            # Nobody here can be asked for roots: mcpx answers with its own (proto.roots).
            self.broker.answer(question.id, self._roots, by="mcpx")
        elif call is None and attributed:
            self._tell_candidates(server, scope_key, question.id)
        return await self._waiting(
            server, scope_key, answered, call, question.id, attributed=attributed
        )

    def _tell_candidates(self, server: str, scope_key: str, question_id: str) -> None:
        """
        A question that could not be tied to one call waits in the broker: each caller
        in flight on that connection whose client can hear it is told it may be theirs,
        and how to answer it (the question itself is shown to none of them).
        """
        if self._candidates is None:
            return
        told: set[int] = set()
        for candidate in self._candidates(server, scope_key):
            if candidate is None or candidate.asker is None:
                continue
            if id(candidate) in told:
                continue
            told.add(id(candidate))
            candidate.asker.tell(
                "notifications/message",
                {
                    "level": "warning",
                    "logger": "mcpx",
                    "data": (
                        f"{server} asked a question while several calls were in flight, "
                        "so mcpx cannot tell whose it is; if your call waits for an "
                        f"answer, it may be this one: run `mcpx elicit {question_id}`"
                    ),
                },
            )

    async def _waiting(
        self,
        server: str,
        scope_key: str,
        answered: Deferred[dict[str, Any]],
        call: Call | None = None,
        withdrawable: str | None = None,
        *,
        attributed: bool = False,
    ) -> dict[str, Any]:
        """
        Wait for C{answered}, with the connection's call deadlines held meanwhile.

        @param call: the call the question is for: its end cancels the wait
            (L{Call.call_ended}).
        @param withdrawable: the question's id, when giving the call up withdraws it
            (L{Call.withdraw}).
        @param attributed: the question is C{call}'s by the pool's attribution alone
            (the server did not say so): the server's reply to the call leaves it be.
        """
        release = self._hold(server, scope_key)
        if call is not None:
            # Given up on, the broker ends it as cancelled, which also withdraws it from
            # a client it was put to.
            withdraw = None if withdrawable is None else partial(self._withdraw, withdrawable)
            call.awaiting(answered, withdraw, attributed=attributed)
        try:
            return await answered
        finally:
            if call is not None:
                call.answered(answered)
            release()

    async def _from_client(
        self,
        server: str,
        scope_key: str,
        method: str,
        shown: dict[str, Any],
        *,
        call: Call,
        key: str | None,
        ahead: Any,
        attributed: bool = False,
    ) -> dict[str, Any]:
        question, from_broker = self.broker.ask(
            server=server,
            scope_key=scope_key,
            method=method,
            params=shown,
            route=ROUTE_CLIENT,
            call_id=call.id or None,
            deadline=self._clock.seconds() + self._client_wait,
            owner=call.owner,
        )
        if call.withdrawn:
            # Asked for a call already given up on: withdrawn before anyone sees it.
            self._withdraw(question.id)
            return await self._waiting(server, scope_key, from_broker)
        if ahead is not None:
            # The client answered before it was asked (2026-07-28 inputResponses).
            self._passed_unfit(question.id, method, shown, ahead)
            self.broker.settle(question.id, ahead, QuestionState.ANSWERED, by="client")
            from_broker.addErrback(lambda _: None).cancel()
            return dict(ahead)
        asker = call.asker
        assert asker is not None
        try:
            from_client = asker.ask(method, shown, key or question.id)
        except ClientUnreachable:
            self._unreachable(question.id, method)
            return await self._waiting(server, scope_key, from_broker, call, attributed=attributed)

        def client_answered(result: Any) -> Deferred[dict[str, Any]] | dict[str, Any]:
            if from_broker.called:
                return {}  # the broker's answer won the race; this one goes nowhere
            self._passed_unfit(question.id, method, shown, result)
            self.broker.settle(question.id, result, QuestionState.ANSWERED, by="client")
            if (
                method == ELICIT
                and isinstance(result, Mapping)
                and result.get("action") == "accept"
            ):
                self._remember_url_ask(server, shown, asker)
            return result if isinstance(result, dict) else {}

        def client_failed(failure: Failure) -> Deferred[dict[str, Any]] | Failure:
            if from_broker.called:
                return failure  # cancelled for the broker's answer, which won the race
            if failure.check(ClientUnreachable):
                # Its client went away: whoever answers the broker answers it now.
                self._unreachable(question.id, method)
                return Deferred()
            if not failure.check(CancelledError):
                self.broker.settle(question.id, None, QuestionState.CANCELLED, by="client")
            return failure

        # Whichever of the client and the broker ends the question first (an answer or
        # an error) gives the server its answer, and the other is cancelled; cancelling
        # the race (the server gave up on the question) cancels both.
        from_client.addCallbacks(client_answered, client_failed)
        outcome = race([_settled(from_client), _settled(from_broker)]).addCallback(_winner)
        return await self._waiting(
            server, scope_key, outcome, call, question.id, attributed=attributed
        )

    def _passed_unfit(
        self, question_id: str, method: str, shown: Mapping[str, Any], result: object
    ) -> None:
        """
        Log a client's answer whose form content mcpx's check finds unfit: it goes to
        the server all the same, which judges it as it would directly (mcpx's check of
        formats such as C{email} may be stricter than the server's); holding it back
        left the call waiting on a broker nobody watched.
        """
        unfit = unfit_answer(method, shown, result)
        if unfit is not None:
            log.warn(
                "the client's answer to question {id} does not fit its form ({why}); "
                "it goes to the server, which judges it",
                id=question_id,
                why=unfit,
            )

    def _unreachable(self, question_id: str, method: str) -> None:
        """The client a question was put to cannot be reached: the broker takes it."""
        if method == LIST_ROOTS:
            # Nobody waits at the broker for roots: mcpx answers with its own at once.
            self.broker.answer(question_id, self._roots, by="mcpx")
        else:
            self.broker.reroute(question_id)

    def _withdraw(self, question_id: str) -> None:
        """
        The question's call was given up on: it ends as cancelled (the server is told so:
        C{cancel} for an elicitation, an error for the others), and a client it was put
        to is told it was withdrawn; an answer that comes later goes nowhere.  (Not while
        the daemon stops: the calls it cuts short leave their questions pending.)
        """
        self.broker.withdraw(question_id)
