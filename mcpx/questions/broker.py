# -*- test-case-name: tests.questions.test_broker -*-
"""
The broker: every question an upstream asks, from the asking until its end.

A question is asked with L{Broker.ask}, which records it and hands back a Deferred for the
result to send upstream.  It then ends in one of four ways: someone entitled answers,
declines or cancels it here (C{mcpx elicit}, C{/v1/questions}); the calling client answered it
natively and the relay L{settles <Broker.settle>} it; the upstream withdraws it (the asker
cancels the Deferred); or its deadline passes, which answers C{cancel} (an expired question
was never declined by anyone).

Every change is saved to the L{QuestionStore}, when there is one, without waiting: a failed
save is logged and never stops an answer going upstream (L{mcpx.questions.saving}).
Questions still pending when the daemon stops stay pending on disk; the next
L{Broker.start} lists them again as orphans (no upstream waits for them any more) until
they are answered or their deadline passes.  Finished questions are listed for C{keep}
seconds, then pruned from memory and the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from attrs import define, field
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from mcpx.auth.caller import attributed_to
from mcpx.questions.answers import judged, upstream_outcome
from mcpx.questions.record import (
    ROUTE_BROKER,
    ROUTE_CLIENT,
    ROUTES,
    Question,
    QuestionState,
    new_question_id,
)
from mcpx.questions.saving import QuestionWrites
from mcpx.questions.store import QuestionStore
from mcpx.spec.questions import CAPABILITY_FOR
from mcpx.store.heartbeat import Heartbeat
from mcpx.wire.errors import RpcError

log = Logger()

#: C{publish(kind, server, **data)}, as L{mcpx.ops.events.EventBus.publish}.
Publish = Callable[..., None]

#: The most questions one call's upstream may have waiting at once.
MAX_PENDING_PER_CALL = 32
#: The most questions one server may have waiting at once, over all its calls.
MAX_PENDING_PER_SERVER = 256
#: The most questions the daemon's upstreams may have waiting at once, in all.
MAX_PENDING = 1024
#: The most finished questions kept listed (for C{keep} seconds each); beyond it the
#: oldest are pruned at once, from memory and the store, so that asking and withdrawing
#: over and over cannot fill either.
MAX_FINISHED = 4096


def too_many_questions(waiting: int, whose: str) -> RpcError:
    """The error an upstream gets for a question beyond one of the bounds above."""
    return RpcError.internal_error(
        f"too many questions waiting: {whose} already has {waiting} unanswered, the most "
        "mcpx keeps; ask again once some are answered"
    )


class UnknownQuestion(LookupError):
    """No question has that id (or it was pruned)."""

    def __init__(self, question_id: str) -> None:
        super().__init__(f"no question {question_id}")
        self.question_id = question_id


class QuestionClosed(Exception):
    """The question is not pending any more (perhaps ended through another daemon)."""

    def __init__(self, question: Question) -> None:
        super().__init__(f"question {question.id} is already {question.state.value}")
        self.question = question


@define(eq=False, slots=False)
class Broker:
    """
    The questions upstream servers asked, pending and recently finished.

    @ivar ttl: seconds a question waits for an answer when its asker gives no deadline.
    @ivar keep: seconds a finished question stays listed before it is pruned.
    """

    _clock: IReactorTime
    _store: QuestionStore | None = field(default=None, kw_only=True)
    _publish: Publish | None = field(default=None, kw_only=True)
    #: This daemon's heartbeat in a shared store: its id is written on each question it
    #: asks, and the others' beats tell which pending questions have a live owner.
    _heartbeat: Heartbeat | None = field(default=None, kw_only=True)
    ttl: float = field(default=120.0, kw_only=True)
    keep: float = field(default=900.0, kw_only=True)
    #: The most questions waiting for an upstream at once: per call, per server, in all.
    max_per_call: int = field(default=MAX_PENDING_PER_CALL, kw_only=True)
    max_per_server: int = field(default=MAX_PENDING_PER_SERVER, kw_only=True)
    max_pending: int = field(default=MAX_PENDING, kw_only=True)
    max_finished: int = field(default=MAX_FINISHED, kw_only=True)
    _finished_count: int = field(default=0, init=False)
    _questions: dict[str, Question] = field(factory=dict, init=False)
    _waiting: dict[str, Deferred[dict[str, Any]]] = field(factory=dict, init=False)
    _deadlines: dict[str, IDelayedCall] = field(factory=dict, init=False)
    _pruning: IDelayedCall | None = field(default=None, init=False)
    #: When a consumer last listed the questions (L{looked}), on the clock.
    _looked: float | None = field(default=None, init=False)
    _closing: bool = field(default=False, init=False)
    #: The opening under way, which a stop waits for: a daemon that fails to start (its
    #: port taken) stops before its store has finished opening.
    _starting: Deferred[None] | None = field(default=None, init=False)
    #: The writes to the store: a question whose write failed (cut off from a shared
    #: store, or its server down) is written again, as it is then, after the next
    #: heartbeat (L{_adopt_lost}).
    _writes: QuestionWrites = field(init=False)

    @_writes.default
    def _writes_of_these(self) -> QuestionWrites:
        return QuestionWrites(self.get, self._merge, lambda: self._closing)

    def start(self) -> Deferred[None]:
        """
        Open the store and list what it holds: pending questions again (as orphans, their
        deadlines re-armed; one already past expires now) and finished ones still in C{keep}.
        """
        self._starting = Deferred.fromCoroutine(self._start())
        return self._starting

    async def _start(self) -> None:
        if self._store is None:
            return
        await self._store.open()
        alive: set[str] = set()
        if self._heartbeat is not None:
            self._heartbeat.on_beat(self._adopt_lost)
            await self._heartbeat.start()
            alive = await self._heartbeat.alive()
            alive.discard(self._heartbeat.daemon)
        loaded = await self._store.load()
        now = self._clock.seconds()
        overdue = []
        for question in loaded:
            if question.pending and question.daemon in alive:
                # Another live daemon's call waits for it: listed and answerable here,
                # but its deadline is its owner's to keep.
                self._questions[question.id] = question
            elif question.pending:
                if self._take_over(question, now):
                    self._adopt(question)
                self._questions[question.id] = question
                if question.deadline > now:
                    self._arm(question, now)
                else:
                    overdue.append(question)
            elif question.finished is not None and question.finished >= now - self.keep:
                self._questions[question.id] = question
        for question in overdue:
            self._finish(question, QuestionState.EXPIRED, "expiry")
        self._prune()
        # From now on what other daemons write is heard (a store of one daemon tells nothing).
        self._store.listen(self._heard)

    def _adopt_lost(self, alive: set[str]) -> Deferred[None]:
        """
        Adopt the pending questions listed here whose daemon stopped beating: they become
        orphans of this daemon, which keeps their deadlines from now on.  (Several daemons
        may adopt one at once; it still ends only once.)  First, the beat having reached
        the store, the questions whose writes failed are written again.
        """
        if self._writes.unsaved and self._store is not None:
            self._writes.track(
                Deferred.fromCoroutine(self._writes.again(self._store)),
                "write the questions again",
            )
        now = self._clock.seconds()
        for question in list(self._questions.values()):
            if not question.pending or not self._remote(question) or question.daemon in alive:
                continue
            log.info(
                "adopted question {id}: its daemon {daemon} is gone",
                id=question.id,
                daemon=question.daemon,
            )
            self._take_over(question, now)
            self._adopt(question)
            self._arm(question, now)
        return succeed(None)

    def _take_over(self, question: Question, now: float) -> bool:
        """
        Make a pending question whose daemon is gone an orphan of this daemon, which
        keeps its deadline from now on; whether that changed what the store holds.
        """
        question.orphaned = True
        changed = question.daemon != self.daemon
        question.daemon = self.daemon
        if question.route == ROUTE_CLIENT:
            # The client it was put to is gone with the old daemon: only the broker can
            # answer it now, within the broker's own deadline.
            question.route = ROUTE_BROKER
            question.deadline = min(question.deadline, now + self.ttl)
            changed = True
        return changed

    def _adopt(self, question: Question) -> None:
        """
        Save C{question}, adopted by this daemon, only if it is still pending in the
        store: if it ended meanwhile (its old daemon's deadline, an answer elsewhere),
        that end is taken in instead.
        """
        if self._store is None:
            return
        self._writes.save_if_pending(
            self._store,
            question,
            lambda stored: None if stored is None else self._merge(stored),
            "adopt " + question.id,
        )

    @property
    def daemon(self) -> str | None:
        """This daemon's id in the shared store, if it has one."""
        return None if self._heartbeat is None else self._heartbeat.daemon

    def _remote(self, question: Question) -> bool:
        """Whether another (live) daemon's call waits for C{question}."""
        return question.daemon is not None and question.daemon != self.daemon

    def closing(self) -> None:
        """
        The daemon is stopping: questions withdrawn from now on (their servers are being
        closed under them) stay pending, so the next daemon lists them again.
        """
        self._closing = True

    def stop(self) -> Deferred[None]:
        """
        Cancel every timer, wait for the saves under way, close the store.

        Pending questions stay pending in the store; their askers' Deferreds are not fired.
        """
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        self._closing = True
        if self._starting is not None:
            # Closed only once opened; the opening's own failure stays the start's to report.
            opened: Deferred[None] = Deferred()

            def passed(result: object) -> object:
                opened.callback(None)
                return result

            self._starting.addBoth(passed)
            await opened
        timers = list(self._deadlines.values())
        if self._pruning is not None:
            timers.append(self._pruning)
        self._deadlines.clear()
        self._pruning = None
        for timer in timers:
            if timer.active():
                timer.cancel()
        await self._writes.settled()
        if self._heartbeat is not None:
            await self._heartbeat.stop()
        if self._store is not None:
            store, self._store = self._store, None
            # Nothing is saved after this: the store is gone, and so is the daemon.
            await store.close()

    def ask(
        self,
        *,
        server: str,
        scope_key: str,
        method: str,
        params: Mapping[str, Any],
        route: str = ROUTE_BROKER,
        call_id: str | None = None,
        deadline: float | None = None,
        owner: str | None = None,
    ) -> tuple[Question, Deferred[dict[str, Any]]]:
        """
        Record a new pending question and announce it (C{question.asked}).

        The Deferred fires with the result to send upstream.  For an elicitation that is an
        C{ElicitResult}: C{accept} with the content (none in url mode), C{decline}, or
        C{cancel} when it was cancelled or expired.  For sampling and roots it is the answer
        given; a decline, cancel or expiry fails it with an L{RpcError} (code
        L{mcpx.questions.answers.REFUSED}).

        Cancelling the Deferred withdraws the question: it ends as cancelled, answered by
        C{"withdrawn"}, and the Deferred fails with L{CancelledError
        <twisted.internet.defer.CancelledError>} as any cancelled Deferred does.

        @param deadline: clock seconds when it expires; L{ttl} from now by default.
        @param owner: the access token subject's identity the call was made for, if any.
        @raise ValueError: an unknown method or route.
        @raise RpcError: too many questions wait for an answer already, for this call
            (L{max_per_call}), this server (L{max_per_server}) or in all
            (L{max_pending}); nothing is recorded.
        """
        if method not in CAPABILITY_FOR:
            raise ValueError(f"not a question method: {method!r}")
        if route not in ROUTES:
            raise ValueError(f"not a question route: {route!r}")
        self._check_room(server, call_id)
        now = self._clock.seconds()
        question = Question(
            id=new_question_id(),
            server=server,
            scope_key=scope_key,
            method=method,
            params=dict(params),
            created=now,
            deadline=now + self.ttl if deadline is None else deadline,
            route=route,
            call_id=call_id,
            owner=owner,
            daemon=self.daemon,
        )
        answered: Deferred[dict[str, Any]] = Deferred(lambda _: self._withdraw(question.id))
        self._questions[question.id] = question
        self._waiting[question.id] = answered
        self._arm(question, now)
        self._save(question)
        self._announce(question)
        return question, answered

    def _check_room(self, server: str, call_id: str | None) -> None:
        """Refuse a question beyond the bounds of what upstreams may have waiting."""
        # Those an upstream of this daemon waits on: never more than max_pending.
        waiting = [self._questions.get(question_id) for question_id in self._waiting]
        if len(waiting) >= self.max_pending:
            raise too_many_questions(len(waiting), "mcpx")
        of_server = [q for q in waiting if q is not None and q.server == server]
        if len(of_server) >= self.max_per_server:
            raise too_many_questions(len(of_server), f"server {server}")
        if call_id is not None:
            of_call = sum(1 for q in of_server if q.call_id == call_id)
            if of_call >= self.max_per_call:
                raise too_many_questions(of_call, "this call")

    def reply(
        self, question_id: str, action: str, result: Mapping[str, Any] | None = None, *, by: str
    ) -> Deferred[Question]:
        """
        End a pending question as a person asked (C{mcpx elicit}, C{/v1/questions}):
        C{action} C{"accept"} with C{result} (as L{answer} takes it), C{"decline"} or
        C{"cancel"}.

        With a store, the question is ended there first, only if it is still pending
        there (C{save_if_pending}): of two daemons answering one question, the second
        fails with L{QuestionClosed}, and the question as the first ended it is listed.
        The asker, on whichever daemon, is told once the store has the answer.

        @raise UnknownQuestion: no such question (synchronously).
        @raise QuestionClosed: it is not pending any more (synchronously or in the Deferred).
        @raise mcpx.questions.answers.InvalidAnswer: C{result} does not fit
            (synchronously); it stays pending.
        """
        question = self._pending(question_id)
        if action == "decline":
            state, checked = QuestionState.DECLINED, None
        elif action == "cancel":
            state, checked = QuestionState.CANCELLED, None
        else:
            state, checked = judged(question, result)
        if self._store is None:
            self._finish(question, state, by, checked)
            return succeed(question)
        return Deferred.fromCoroutine(self._reply(self._store, question, state, by, checked))

    async def _reply(
        self,
        store: QuestionStore,
        question: Question,
        state: QuestionState,
        by: str,
        result: dict[str, Any] | None,
    ) -> Question:
        ended = Question.from_json(question.to_json())
        outcome = upstream_outcome(question, state, result)
        ended.state = state
        ended.answer = None if isinstance(outcome, RpcError) else outcome
        ended.answered_by = by
        ended.finished = self._clock.seconds()
        if await store.save_if_pending(ended):
            if question.pending:
                self._finish(question, state, by, result, saved=True)
            return question
        # Ended before this answer came: by another daemon, or by its deadline.
        stored = await store.get(question.id)
        if stored is None and question.pending and question.id in self._writes.unsaved:
            # Asked while the store could not be written: nobody else can have ended it.
            await store.save(ended)
            self._writes.unsaved.written(question.id)
            self._finish(question, state, by, result, saved=True)
            return question
        if stored is not None:
            self._merge(stored)
        raise QuestionClosed(self._questions.get(question.id, stored or question))

    def _heard(self, question_id: str | None) -> None:
        """A question was written, perhaps by another daemon: read it again."""
        if self._store is None:
            return
        if question_id is None:
            # Some changes may have gone unheard (the store's connection was lost).
            self._writes.track(
                self._store.load().addCallback(self._merge_all), "re-read the questions"
            )
            return
        self._writes.track(
            self._store.get(question_id).addCallback(
                lambda stored: None if stored is None else self._merge(stored)
            ),
            "read question " + question_id,
        )

    def _merge_all(self, stored: list[Question]) -> None:
        for question in stored:
            self._merge(question)

    def _merge(self, stored: Question) -> None:
        """
        Take in what the store holds of a question: a new one another daemon asked is
        listed; one ended elsewhere ends here too, and its asker, if it waits here, gets
        the answer given there.
        """
        if self._store is None:
            return
        local = self._questions.get(stored.id)
        if local is None:
            now = self._clock.seconds()
            if stored.pending and self._remote(stored):
                self._questions[stored.id] = stored
                self._announce(stored)
            elif stored.finished is not None and stored.finished >= now - self.keep:
                self._questions[stored.id] = stored
                self._schedule_prune()
            return
        if not local.pending:
            return
        if stored.pending:
            local.route = stored.route
            return
        self._close(
            local,
            stored.state,
            stored.answer,
            stored.answered_by,
            finished=stored.finished,
            saved=True,
        )
        self._tell_asker(local, upstream_outcome(local, local.state, local.answer))

    def answer(self, question_id: str, result: Mapping[str, Any], *, by: str) -> Question:
        """
        Answer a pending question with C{result}, after checking that it fits.

        An elicitation takes an C{ElicitResult} (C{action} accept, decline or cancel; an
        accepted form's C{content} must fit its C{requestedSchema}); sampling takes a
        C{CreateMessageResult}; roots a C{ListRootsResult} of C{file://} roots.

        @param by: who answered, in a word (C{"cli"}, C{"api"}...).
        @raise UnknownQuestion: no such question.
        @raise QuestionClosed: it is not pending any more.
        @raise mcpx.questions.answers.InvalidAnswer: C{result} does not fit; the
            question stays pending.
        """
        question = self._pending(question_id)
        state, checked = judged(question, result)
        self._finish(question, state, by, checked)
        return question

    def decline(self, question_id: str, *, by: str) -> Question:
        """
        Decline a pending question.

        @raise UnknownQuestion: no such question.
        @raise QuestionClosed: it is not pending any more.
        """
        question = self._pending(question_id)
        self._finish(question, QuestionState.DECLINED, by)
        return question

    def cancel(self, question_id: str, *, by: str) -> Question:
        """
        Cancel a pending question (dismissed without a choice).

        @raise UnknownQuestion: no such question.
        @raise QuestionClosed: it is not pending any more.
        """
        question = self._pending(question_id)
        self._finish(question, QuestionState.CANCELLED, by)
        return question

    def withdraw(self, question_id: str) -> None:
        """
        The question's call was given up on: a pending question ends as cancelled,
        answered by C{"withdrawn"} (its asker gets what a cancel gives).  Once the daemon
        is closing the calls it cuts short are not given up on: their questions stay
        pending, for the next daemon to list.  Unknown and finished questions are ignored.
        """
        if self._closing:
            return
        question = self._questions.get(question_id)
        if question is not None and question.pending:
            self._finish(question, QuestionState.CANCELLED, "withdrawn")

    def settle(
        self,
        question_id: str,
        result: Mapping[str, Any] | None,
        state: QuestionState,
        *,
        by: str,
    ) -> None:
        """
        Record how a question put to the client ended, as it is, without checking it.

        The asker's Deferred is not fired, now or later: the relay already has the answer.
        Unknown and already finished questions are ignored.

        @raise ValueError: C{state} is L{QuestionState.PENDING}.
        """
        if state is QuestionState.PENDING:
            raise ValueError("a question cannot be settled as pending")
        question = self._questions.get(question_id)
        if question is None or not question.pending:
            return
        self._waiting.pop(question_id, None)
        self._close(question, state, None if result is None else dict(result), by)

    def reroute(self, question_id: str) -> None:
        """
        Hand a question the client could not take to the broker's consumers.

        It stays pending with the same deadline and is announced again with route
        C{"broker"}.  Unknown, finished or already broker-routed questions are ignored.
        """
        question = self._questions.get(question_id)
        if question is None or not question.pending or question.route != ROUTE_CLIENT:
            return
        question.route = ROUTE_BROKER
        self._save(question)
        self._announce(question)

    def looked(self) -> None:
        """A consumer (C{GET /v1/questions}: C{mcpx elicit}, a call's watch) listed them."""
        self._looked = self._clock.seconds()

    def looked_within(self, seconds: float) -> bool:
        """Whether a consumer listed the questions in the last C{seconds}."""
        return self._looked is not None and self._clock.seconds() - self._looked <= seconds

    def get(self, question_id: str) -> Question | None:
        return self._questions.get(question_id)

    def questions(self, *, state: QuestionState | None = None) -> list[Question]:
        """The listed questions (those in C{state}, if given), oldest first."""
        chosen = [q for q in self._questions.values() if state is None or q.state is state]
        chosen.sort(key=lambda question: question.created)
        return chosen

    def _pending(self, question_id: str) -> Question:
        question = self._questions.get(question_id)
        if question is None:
            raise UnknownQuestion(question_id)
        if not question.pending:
            raise QuestionClosed(question)
        return question

    def _finish(
        self,
        question: Question,
        state: QuestionState,
        by: str,
        result: dict[str, Any] | None = None,
        *,
        saved: bool = False,
    ) -> None:
        """
        End C{question} in C{state}, then tell its asker what goes upstream.

        @param saved: the store has it ended already (L{reply}).
        """
        outcome = upstream_outcome(question, state, result)
        self._close(
            question, state, None if isinstance(outcome, RpcError) else outcome, by, saved=saved
        )
        # Told only once the record is complete, so the asker's callbacks see it finished.
        self._tell_asker(question, outcome)

    def _tell_asker(self, question: Question, outcome: Mapping[str, Any] | RpcError) -> None:
        """Give the upstream waiting on C{question} here, if one does, what it gets."""
        waiting = self._waiting.pop(question.id, None)
        if waiting is None:
            return
        if isinstance(outcome, RpcError):
            waiting.errback(outcome)
        else:
            waiting.callback(dict(outcome))

    def _close(
        self,
        question: Question,
        state: QuestionState,
        answer: dict[str, Any] | None,
        by: str | None,
        *,
        finished: float | None = None,
        saved: bool = False,
    ) -> None:
        """
        Record C{question}'s end (C{finished}: when, now by default), stop its deadline
        and say it closed.

        @param saved: the store has it ended already (an answer through it, or its end
            read from it).
        """
        question.state = state
        question.answer = answer
        question.answered_by = by
        question.finished = self._clock.seconds() if finished is None else finished
        timer = self._deadlines.pop(question.id, None)
        if timer is not None and timer.active():
            timer.cancel()
        if not saved and self._store is not None:
            self._writes.save_ended(self._store, question)
        self._emit(
            "question.closed",
            question.server,
            **attributed_to(question.owner),
            id=question.id,
            state=state.value,
        )
        self._schedule_prune()
        self._finished_count += 1
        if self._finished_count > self.max_finished:
            self._prune_oldest()

    def _prune_oldest(self) -> None:
        """Forget the oldest finished questions past L{max_finished}, and a tenth more."""
        finished = sorted(
            question.finished
            for question in self._questions.values()
            if question.finished is not None
        )
        self._finished_count = len(finished)
        excess = len(finished) - self.max_finished
        if excess <= 0:
            return
        horizon = finished[min(len(finished), excess + self.max_finished // 10) - 1]
        for question in list(self._questions.values()):
            if question.finished is not None and question.finished <= horizon:
                del self._questions[question.id]
        self._finished_count = sum(1 for q in self._questions.values() if q.finished is not None)
        if self._store is not None:
            self._writes.track(self._store.prune(horizon), "prune the question store")

    def _schedule_prune(self) -> None:
        if self._pruning is None:
            self._pruning = self._clock.callLater(max(self.keep, 1.0), self._prune)

    def _withdraw(self, question_id: str) -> None:
        question = self._questions.get(question_id)
        if question is not None and question.pending:
            # Popped first: the Deferred being cancelled must not be fired by _finish.
            self._waiting.pop(question_id, None)
            if self._closing:
                # Withdrawn by the shutdown, not by its server: it stays pending on disk.
                return
            self._close(question, QuestionState.CANCELLED, None, "withdrawn")

    def _arm(self, question: Question, now: float) -> None:
        delay = max(0.0, question.deadline - now)
        self._deadlines[question.id] = self._clock.callLater(delay, self._expire, question.id)

    def _expire(self, question_id: str) -> None:
        self._deadlines.pop(question_id, None)
        question = self._questions.get(question_id)
        if question is not None and question.pending:
            self._finish(question, QuestionState.EXPIRED, "expiry")

    def _prune(self) -> None:
        """Forget questions finished more than C{keep} ago; come back for the next one."""
        self._pruning = None
        now = self._clock.seconds()
        horizon = now - self.keep
        oldest: float | None = None
        for question in list(self._questions.values()):
            if question.finished is None:
                continue
            if question.finished <= horizon:
                del self._questions[question.id]
            elif oldest is None or question.finished < oldest:
                oldest = question.finished
        if self._store is not None:
            self._writes.track(self._store.prune(horizon), "prune the question store")
        if oldest is not None:
            # At least a second apart: float rounding must not spin this on one instant.
            delay = max(oldest + self.keep - now, 1.0)
            self._pruning = self._clock.callLater(delay, self._prune)

    def _announce(self, question: Question) -> None:
        self._emit(
            "question.asked",
            question.server,
            **attributed_to(question.owner),
            id=question.id,
            method=question.method,
            route=question.route,
            call=question.call_id,
        )

    def _emit(self, kind: str, server: str, **data: Any) -> None:
        if self._publish is not None:
            self._publish(kind, server, **data)

    def _save(self, question: Question) -> None:
        if self._store is not None:
            self._writes.save(self._store, question)
