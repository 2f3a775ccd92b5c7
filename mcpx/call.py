# -*- test-case-name: tests.test_call,tests.questions.test_caller -*-
"""
A host's call: one request on whose behalf mcpx calls upstream, and its life.

A L{Call} is made for each host request that reaches an upstream (a tool call, a
prompt, a resource read) when anything about it needs one: its client may be asked,
it declares upstream on its own, it runs as a task or sent answers ahead.  It travels
with the pool's request (L{mcpx.pool.interface.PoolRequest.call}), so the pool can say
which call owns a connection when a question arrives on it (the attribution rule,
L{mcpx.pool.pool.Pool.owner}), and it carries what the host declared: the questions its
client may be put (L{mcpx.spec.questions.may_ask}) and, in pass-through, the
capabilities mcpx may declare upstream on its behalf (L{Call.declared}).

Its life is a state machine (L{CallState}): it runs; once a question is tied to it, it
asks; it may become a task (and then outlives its client's going); it ends when its
work settles, or, when its client cancels it, it is withdrawn, and so are its
questions.  See "The life of a call" in C{docs/architecture.md}.

This module sits on the ground floor: every floor may import it, it imports nothing of
mcpx.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from attrs import define, field
from automat import TypeMachineBuilder, pep614
from twisted.internet.defer import Deferred

__all__ = ["Asker", "Call", "CallState", "ClientUnreachable", "narrowed"]


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


class CallState(enum.Enum):
    """Where a call is in its life (L{Call.state})."""

    #: Made, and nothing has been asked for it yet.
    RUNNING = "running"
    #: A question was tied to it: it is on the ask path, and keeps running (as a
    #: L{TASK}) if its client stops waiting without cancelling it.
    ASKING = "asking"
    #: It is a task: it outlives its client's request, until collected.
    TASK = "task"
    #: Its work settled (finished, failed or was cancelled).
    ENDED = "ended"
    #: Given up on (its client cancelled it): its questions were withdrawn, and any it
    #: is asked from now on are withdrawn at once.
    WITHDRAWN = "withdrawn"


@define(eq=False, slots=True)
class _Life:
    """
    Where a call is, and the questions it awaits answers to: the core its state
    machine moves (L{_Moves}).
    """

    #: Set by the machine's transitions (and by L{Call.ended} for a call that never
    #: moved), so it is right however re-entrantly it is read (a question withdrawn
    #: may wake code that asks the call again).
    state: CallState = CallState.RUNNING
    #: The answers its questions are awaited on, each with how to withdraw that
    #: question if the call is given up on (C{None}: it is not withdrawn then).
    #: C{None} while none is: most calls ask nothing, and make neither this nor
    #: L{attributed}.
    answers: dict[Deferred[Any], Callable[[], None] | None] | None = None
    #: Those of them tied to the call by the pool's attribution alone (the server did
    #: not say whose they are): its reply to the call does not end them.
    attributed: set[Deferred[Any]] | None = None


class _Moves(Protocol):
    """What moves a call from one state to another (the inputs of its machine)."""

    def question_asked(self) -> None:
        """A question was tied to the call."""

    def became_task(self) -> None:
        """The call became a task."""

    def ended(self) -> None:
        """The call's work settled."""

    def withdraw(self) -> None:
        """The call was given up on."""


_machine = TypeMachineBuilder(_Moves, _Life)
_Running = _machine.state("Running")
_Asking = _machine.state("Asking")
_Task = _machine.state("Task")
_Ended = _machine.state("Ended")
_Withdrawn = _machine.state("Withdrawn")

_Asking.upon(_Moves.question_asked).loop().returns(None)
_Task.upon(_Moves.question_asked).loop().returns(None)
_Task.upon(_Moves.became_task).loop().returns(None)
# An ended or withdrawn call stays so, whatever happens to it after.
for _over in (_Ended, _Withdrawn):
    for _move in (_Moves.question_asked, _Moves.became_task, _Moves.ended, _Moves.withdraw):
        _over.upon(_move).loop().returns(None)


@pep614(_Running.upon(_Moves.question_asked).to(_Asking))
def _asks(moves: _Moves, life: _Life) -> None:
    life.state = CallState.ASKING


@pep614(_Running.upon(_Moves.became_task).to(_Task))
@pep614(_Asking.upon(_Moves.became_task).to(_Task))
def _becomes_task(moves: _Moves, life: _Life) -> None:
    life.state = CallState.TASK


@pep614(_Running.upon(_Moves.ended).to(_Ended))
@pep614(_Asking.upon(_Moves.ended).to(_Ended))
@pep614(_Task.upon(_Moves.ended).to(_Ended))
def _ends(moves: _Moves, life: _Life) -> None:
    life.state = CallState.ENDED


@pep614(_Running.upon(_Moves.withdraw).to(_Withdrawn))
@pep614(_Asking.upon(_Moves.withdraw).to(_Withdrawn))
@pep614(_Task.upon(_Moves.withdraw).to(_Withdrawn))
def _withdrawn(moves: _Moves, life: _Life) -> None:
    # Every question awaited for it is withdrawn, once, so the server hears the answer
    # a withdrawn question gets.
    life.state = CallState.WITHDRAWN
    if life.answers is None:
        return
    for withdraw in [w for w in life.answers.values() if w is not None]:
        withdraw()


_new_moves = _machine.build()
#: The machine of every call that ended without moving before: ENDED takes every input
#: without touching the call, so one machine in that state serves them all.
_ended_unmoved = _new_moves(_Life(CallState.ENDED), _Ended)


@define(eq=False, slots=True)
class Call:
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
    wants_task: bool = False
    on_upstream_task: Callable[[], None] | None = None
    strict: bool = False
    refused: Exception | None = None
    owner: str | None = None
    host: str | None = None
    legacy: bool = False
    _life: _Life = field(factory=_Life, init=False)
    #: Its state machine, made when its life first moves (L{question_asked},
    #: L{became_task}, L{ended}, L{withdraw}): a call that only runs never pays for it.
    _moved: _Moves | None = field(default=None, init=False)

    def _moves(self) -> _Moves:
        moves = self._moved
        if moves is None:
            moves = self._moved = _new_moves(self._life)
        return moves

    @property
    def state(self) -> CallState:
        """Where the call is in its life."""
        return self._life.state

    @property
    def asked(self) -> bool:
        """Whether a question was tied to it and it asks on (L{CallState.ASKING})."""
        return self._life.state is CallState.ASKING

    @property
    def is_task(self) -> bool:
        """Whether it is a task, outliving its client's request (L{CallState.TASK})."""
        return self._life.state is CallState.TASK

    @property
    def withdrawn(self) -> bool:
        """Whether the call was given up on (L{CallState.WITHDRAWN})."""
        return self._life.state is CallState.WITHDRAWN

    @property
    def declared(self) -> Mapping[str, Any] | None:
        """The client capabilities to declare upstream for this call (C{None}: mcpx's own)."""
        return narrowed(self.capabilities) if self.narrow else None

    def question_asked(self) -> None:
        """
        A question was tied to this call: it is on the ask path (L{CallState.ASKING}),
        and keeps running if its client stops waiting.
        """
        self._moves().question_asked()

    def became_task(self) -> None:
        """
        The call became a task (L{CallState.TASK}): it outlives its client's request,
        and may still ask.
        """
        self._moves().became_task()

    def ended(self) -> None:
        """Its work settled: it finished, failed or was cancelled (L{CallState.ENDED})."""
        if self._moved is None:
            # Most calls end having only run: no machine of their own is made for that.
            self._life.state = CallState.ENDED
            self._moved = _ended_unmoved
        else:
            self._moved.ended()

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
        life = self._life
        if life.answers is None:
            life.answers = {}
        life.answers[answer] = withdraw
        if attributed:
            if life.attributed is None:
                life.attributed = set()
            life.attributed.add(answer)

    def answered(self, answer: Deferred[Any]) -> None:
        """C{answer} is no longer awaited (it fired, or was cancelled)."""
        life = self._life
        if life.answers is not None:
            life.answers.pop(answer, None)
        if life.attributed is not None:
            life.attributed.discard(answer)

    def withdraw(self) -> None:
        """
        The call was given up on (its client cancelled it): withdraw every question
        awaited for it, once, so the server hears the answer a withdrawn question gets
        (L{CallState.WITHDRAWN}).
        """
        self._moves().withdraw()

    def call_ended(self, *, answered: bool = False) -> None:
        """
        An upstream request made for this call ended: the questions it asked that
        still wait are withdrawn, so nobody is left to answer a question nothing waits
        for.  (The call itself goes on, until L{ended}: a run's or an op's call makes
        many requests.)

        @param answered: the server replied to it (a result or an error), rather than
            mcpx giving it up (a task cancelled, a client gone or interrupted, its
            deadline passed) or losing the connection.  Then a question tied to the
            call only by the pool's attribution (L{awaiting}) goes on to its answer: the
            server still waits for it, and may have asked it outside any call (roots
            again after its client's C{notifications/roots/list_changed}, say) while
            this call happened to be in flight.
        """
        life = self._life
        answers, attributed = life.answers, life.attributed
        if answers is None:
            # Nothing was asked for it (nor attributed to it, which only an awaited
            # answer is): the call of every request that asks nothing.
            return
        life.answers = life.attributed = None
        for answer in answers:
            if not (answered and attributed is not None and answer in attributed):
                answer.cancel()

    def take_held(self, key: str | None) -> Any:
        """The answer the client sent ahead for C{key}, once; C{None} when there is none."""
        if key is None or not self.held:
            return None
        return self.held.pop(key, None)


def narrowed(capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """
    The part of a client's declaration mcpx can honour on its behalf upstream: the
    questions it relays (elicitation, sampling, roots), as the client spelled them.
    """
    if not capabilities:
        # Most calls' clients declare nothing: nothing to look through.
        return {}
    declared = {
        name: dict(value)
        for name in ("elicitation", "sampling")
        if isinstance(value := capabilities.get(name), Mapping)
    }
    if isinstance(capabilities.get("roots"), Mapping):
        # Not listChanged: 2026-07-28, where a declaration travels per request, has none.
        declared["roots"] = {}
    return declared
