# -*- test-case-name: tests.questions.test_caller -*-
"""
The call an upstream's question may belong to, and whether its client may be asked.

A L{Caller} is made for each host request that reaches an upstream (a tool call, a
prompt, a resource read).  It travels with the pool's request, so the pool can say
which call owns a connection when a question arrives on it (the attribution rule,
L{mcpx.pool.pool.Pool.owner}), and it carries what the host declared: the questions
its client may be put (L{may_ask}) and, in pass-through, the capabilities mcpx may
declare upstream on its behalf (L{narrowed}).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from attrs import define, field
from twisted.internet.defer import Deferred

from mcpx.spec.apps import UI_EXTENSION, declared_ui

ELICIT: Final = "elicitation/create"
SAMPLE: Final = "sampling/createMessage"
LIST_ROOTS: Final = "roots/list"

#: The client capabilities a question needs, by method.
CAPABILITY_FOR: Final = {ELICIT: "elicitation", SAMPLE: "sampling", LIST_ROOTS: "roots"}


class ClientUnreachable(Exception):
    """The client cannot be asked after all (its connection went); the broker takes over."""


class Asker(Protocol):
    """How mcpx puts a question to the client that made a call."""

    def ask(self, method: str, params: dict[str, Any], key: str) -> Deferred[Any]:
        """
        Put one question; the Deferred fires with the client's result.

        @param key: the question's name in a 2026-07-28 C{inputRequests} map.
        @raise ClientUnreachable: (as the Deferred's failure) when the client cannot
            be reached any more.
        """
        ...

    def tell(self, method: str, params: dict[str, Any]) -> bool:
        """
        Send the client a notification about a question it was asked (a url-mode
        elicitation's completion), if its revision and connection allow.

        @return: whether it was sent.
        """
        ...


@define(eq=False, slots=True)
class Caller:
    """
    One host request on whose behalf mcpx calls upstream.

    @ivar id: names the call in the broker's records (a task id once it is one).
    @ivar capabilities: what the host's client declared, for this request.
    @ivar asker: how to put a question to that client, or C{None} when it cannot be
        asked (a sessionless POST, C{proto.native} off, nothing declared).
    @ivar narrow: declare upstream only what the client declared (pass-through), rather
        than everything mcpx can answer.
    @ivar held: C{inputResponses} the client sent before anything was asked, by key,
        given to the questions whose keys match when the upstream asks.
    @ivar asked: a question was attributed to this call: it is on the ask path, and
        keeps running if its client stops waiting.
    @ivar withdrawn: the call was given up on (its client cancelled it): its questions
        were withdrawn, and any it is asked from now on are withdrawn at once.
    @ivar wants_task: the call runs as a task of mcpx's (its client asked for one), so
        a tool that may run as a task upstream is made one there too.
    @ivar on_upstream_task: called when the upstream made the call a task of its own
        (a 2026-07-28 client that accepts tasks is then given one at once).
    @ivar strict: a question this client did not declare the capability for is refused
        (a 2026-07-28 request in pass-through: the upstream's own answer would be
        -32021), rather than left with the broker.
    @ivar refused: the -32021 error such a question was refused with; the request
        fails with it whatever the upstream makes of the refusal.
    @ivar owner: the caller identity of the access token's subject the request came
        with, recorded on its questions (L{mcpx.questions.record.Question.owner}).
    @ivar host: who made the call (its connection or named session, and its access
        token's subject), or C{None} when unknown: a request of the same host that
        mcpx gave up on does not keep this call's questions from it
        (L{mcpx.pool.attribution.Attribution.owner}).
    @ivar legacy: the host speaks a handshake-era revision: a dual-era server is met
        in that era too (era mirroring, L{mcpx.pool.pool.Pool.in_host_era}), where it
        may ask on the connection what it cannot ask a 2026-07-28 client.
    """

    id: str
    capabilities: Mapping[str, Any]
    asker: Asker | None = None
    narrow: bool = False
    held: dict[str, Any] | None = None
    asked: bool = False
    withdrawn: bool = False
    wants_task: bool = False
    on_upstream_task: Callable[[], None] | None = None
    strict: bool = False
    refused: Exception | None = None
    owner: str | None = None
    host: str | None = None
    legacy: bool = False
    #: The answers its questions are awaited on, each with how to withdraw that
    #: question if the call is given up on (C{None}: it is not withdrawn then).
    _awaited: dict[Deferred[Any], Callable[[], None] | None] = field(factory=dict)
    #: Those of them tied to this call by the pool's attribution alone (the server did
    #: not say whose they are): its reply to the call does not end them.
    _attributed: set[Deferred[Any]] = field(factory=set)

    @property
    def declared(self) -> Mapping[str, Any] | None:
        """The client capabilities to declare upstream for this call (C{None}: mcpx's own)."""
        return narrowed(self.capabilities) if self.narrow else None

    @property
    def extensions(self) -> Mapping[str, Any] | None:
        """
        The extensions the host declared that travel upstream with its calls to a
        revision that has them, as it spelled them: MCP Apps (L{UI_EXTENSION}), so a
        server offers its app only to a host that renders one.  C{None} when it declared
        none of them: mcpx never declares one on a host's behalf.
        """
        declared = declared_ui(self.capabilities)
        return None if declared is None else {UI_EXTENSION: dict(declared)}

    def awaiting(
        self,
        answer: Deferred[Any],
        withdraw: Callable[[], None] | None = None,
        *,
        attributed: bool = False,
    ) -> None:
        """
        A question of this call is awaited on C{answer}, until L{answered}: the call's
        end (L{call_ended}) cancels it, and giving the call up (L{withdraw}) calls
        C{withdraw}.  Whoever asks for a call already L{withdrawn} withdraws the
        question first.

        @param attributed: the question was tied to this call only because the call
            was all that was in flight on its connection
            (L{mcpx.pool.attribution.Attribution.owner}): it may be the server's own,
            asked outside any call, so the server's reply to the call does not end it.
        """
        self._awaited[answer] = withdraw
        if attributed:
            self._attributed.add(answer)

    def answered(self, answer: Deferred[Any]) -> None:
        """C{answer} is no longer awaited (it fired, or was cancelled)."""
        self._awaited.pop(answer, None)
        self._attributed.discard(answer)

    def withdraw(self) -> None:
        """
        The call was given up on (its client cancelled it): withdraw every question
        awaited for it, once, so the server hears the answer a withdrawn question gets.
        """
        if self.withdrawn:
            return
        self.withdrawn = True
        for withdraw in [w for w in self._awaited.values() if w is not None]:
            withdraw()

    def call_ended(self, *, answered: bool = False) -> None:
        """
        The upstream request ended: the questions it asked that still wait are
        withdrawn, so nobody is left to answer a question nothing waits for.

        @param answered: the server replied to it (a result or an error), rather than
            mcpx giving it up (a task cancelled, a client gone or interrupted, its
            deadline passed) or losing the connection.  Then a question tied to the
            call only by the pool's attribution (L{awaiting}) goes on to its answer: the
            server still waits for it, and may have asked it outside any call (roots
            again after its client's C{notifications/roots/list_changed}, say) while
            this call happened to be in flight.
        """
        awaited, self._awaited = self._awaited, {}
        attributed, self._attributed = self._attributed, set()
        for answer in awaited:
            if not (answered and answer in attributed):
                answer.cancel()

    def take_held(self, key: str | None) -> Any:
        """The answer the client sent ahead for C{key}, once; C{None} when there is none."""
        if key is None or not self.held:
            return None
        return self.held.pop(key, None)


def _object(value: object) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def may_ask(capabilities: Mapping[str, Any], method: str, params: Mapping[str, Any]) -> bool:
    """
    Whether a client that declared C{capabilities} may be put this question.

    Declaring one kind is not declaring another; within elicitation the mode counts
    (an empty C{elicitation} object is the form mode of the revisions before modes
    existed), and within sampling tool use and context inclusion need their own
    declarations.
    """
    if method == ELICIT:
        declared = _object(capabilities.get("elicitation"))
        if declared is None:
            return False
        mode = params.get("mode", "form")
        if mode == "url":
            return "url" in declared
        return "form" in declared or not declared
    if method == SAMPLE:
        declared = _object(capabilities.get("sampling"))
        if declared is None:
            return False
        if ("tools" in params or "toolChoice" in params) and "tools" not in declared:
            return False
        include = params.get("includeContext")
        return include not in ("thisServer", "allServers") or "context" in declared
    if method == LIST_ROOTS:
        return _object(capabilities.get("roots")) is not None
    return False


def narrowed(capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """
    The part of a client's declaration mcpx can honour on its behalf upstream: the
    questions it relays (elicitation, sampling, roots), as the client spelled them.
    """
    declared = {
        name: dict(value)
        for name in ("elicitation", "sampling")
        if isinstance(value := capabilities.get(name), Mapping)
    }
    if isinstance(capabilities.get("roots"), Mapping):
        # Not listChanged: 2026-07-28, where a declaration travels per request, has none.
        declared["roots"] = {}
    return declared
