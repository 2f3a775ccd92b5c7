# -*- test-case-name: tests.questions.test_broker,tests.store.test_fleet -*-
"""
The broker's writes to its question store (L{QuestionWrites}), none of them waited for:
each failure is logged, never raised into an answer going upstream, and the question
is noted to be written again, as it is then, after the next heartbeat reaches the store.

A question ended here is written as ended only if the store still has it pending: when
another daemon of a fleet ended it first, the store's end is taken in instead, so two
daemons never disagree on how one question ended.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.questions.record import Question
from mcpx.questions.store import QuestionStore
from mcpx.store.unsaved import Unsaved
from mcpx.store.writes import Writes

log = Logger()

__all__ = ["QuestionWrites"]


@define
class QuestionWrites:
    """
    The writes of one broker's questions.

    @ivar local: the broker's question of that id, if it lists one.
    @ivar take_in: takes in what the store holds of a question still pending here (the
        broker's merge: ended there, it ends here too).
    @ivar closing: whether the daemon is stopping (a write failing then is not retried).
    @ivar unsaved: the questions whose write failed, to write again (L{again}).
    """

    local: Callable[[str], Question | None]
    take_in: Callable[[Question], None]
    closing: Callable[[], bool]
    unsaved: Unsaved = field(factory=lambda: Unsaved("question", "the store"), init=False)
    _writes: Writes = field(factory=Writes, init=False)

    def track(self, pending: Deferred[Any], what: str) -> None:
        """Keep C{pending}, a read or write nobody waits for, until it ends; log its failure."""
        self._writes.track(pending, what)

    def settled(self) -> Deferred[None]:
        """Fires once the writes under way now have ended."""
        return self._writes.settled()

    def save(self, store: QuestionStore, question: Question) -> None:
        """Write C{question} as it is now."""
        saving = store.save(question).addErrback(self._not_saved, question)
        self._writes.track(saving, "save question " + question.id)

    def _not_saved(self, failure: Failure, question: Question) -> Failure:
        """Note C{question} for writing again; the failure goes on to be logged."""
        if not self.closing():
            self.unsaved.note(question.id)
        return failure

    def save_ended(self, store: QuestionStore, question: Question) -> None:
        """
        Save C{question}, just ended here (its deadline, its asker, its client), only if
        the store still has it pending; if another daemon ended it first, what the store
        says is taken in instead.
        """

        def ended_elsewhere(stored: Question | None) -> None:
            log.info(
                "question {id} was ended through another daemon before it was {state} here",
                id=question.id,
                state=question.state.value,
            )
            self._overwrite(stored)

        self.save_if_pending(store, question, ended_elsewhere, "save " + question.id)

    def save_if_pending(
        self,
        store: QuestionStore,
        question: Question,
        lost: Callable[[Question | None], None],
        what: str,
    ) -> None:
        """
        Save C{question} only if the store still has it pending; if it does not, what
        the store holds of it (C{None} if nothing) goes to C{lost}.
        """

        def saved(won: bool) -> Deferred[None] | None:
            if won:
                return None
            return store.get(question.id).addCallback(lost)

        self._writes.track(
            store.save_if_pending(question)
            .addCallback(saved)
            .addErrback(self._not_saved, question),
            what,
        )

    async def again(self, store: QuestionStore) -> None:
        """
        Write the questions whose writes failed, as they are here now: a question the
        store never got is written whole; one it has is ended there as here, unless it
        was ended there first (through another daemon), which this daemon takes in.
        """
        for question_id in self.unsaved:
            local = self.local(question_id)
            if local is None:
                self.unsaved.written(question_id)
                continue
            try:
                stored = await store.get(question_id)
                if stored is None:
                    await store.save(local)
                elif local.pending:
                    self.take_in(stored)
                elif stored.pending:
                    if not await store.save_if_pending(local):
                        self._overwrite(await store.get(question_id))
                else:
                    self._overwrite(stored)
            except Exception as e:
                self.unsaved.failed_again(question_id, e)
                continue
            self.unsaved.written(question_id)

    def _overwrite(self, stored: Question | None) -> None:
        """The store's end of a question ended here too stands: it is copied over ours."""
        if stored is None:
            return
        local = self.local(stored.id)
        if local is not None and not stored.pending:
            local.state, local.answer = stored.state, stored.answer
            local.answered_by, local.finished = stored.answered_by, stored.finished
