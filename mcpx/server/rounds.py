# -*- test-case-name: tests.server.test_fleet_rounds -*-
"""
The one-time records of the C{requestState}s mcpx hands 2026-07-28 clients, and the
retries that reach the daemon holding their call.

Each state issued is a record of kind L{ROUNDS} under the state's nonce (C{issued}); the
retry that carries it takes it, once, by compare-and-set (C{issued} to C{claimed}, with
the answers it brought), so that of two retries with one state, on one daemon or on two,
one is honoured and the other is refused.  Without a store (tests) the records are kept
in memory.

A retry reaching a daemon other than the one holding the call (the state names it) is
relayed through the store: the claimed record carries the answers, its C{NOTIFY} wakes
the owner, which gives them to the waiting call and writes what the call came to (the
next C{input_required} or the result) into the record (C{replied}); the daemon the retry
reached hears that and answers its client with it.  An owner with no recent heartbeat is
refused before the state is used; one that dies while the retry waits ends the wait with
an error at its next look (every L{EVERY} seconds), never a hang.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Final

from attrs import frozen
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from mcpx.server.request_state import RequestState
from mcpx.store.heartbeat import EVERY, TIMEOUT
from mcpx.store.records import ROUNDS, Record, RecordStore, StoreClosed
from mcpx.store.writes import Writes
from mcpx.wire.errors import RpcError

log = Logger()

#: The states of a round's record.
ISSUED: Final = "issued"
CLAIMED: Final = "claimed"
REPLIED: Final = "replied"


@frozen
class Claim:
    """A retry's answers for a call this daemon holds, taken on another daemon."""

    call: str
    binding: str
    rounds: int
    subject: str | None
    responses: dict[str, Any]


#: What the owner does with a claim: the call's next answer (raises L{RpcError}).
Serve = Callable[[Claim], Awaitable[Mapping[str, Any]]]


def _used() -> RpcError:
    return RpcError.invalid_params(
        "requestState was already used: each one resumes its request once; send the "
        "retry with the requestState of the latest answer, or the request again without it"
    )


def _gone(daemon: str) -> RpcError:
    return RpcError.internal_error(
        f"the call this requestState resumes was held by the mcpx daemon {daemon}, which "
        "has stopped: send the request again without requestState"
    )


def _round_body(state: RequestState) -> dict[str, Any]:
    """What a round's record says of its state, issued or claimed alike."""
    return {
        "call": state.call,
        "daemon": state.daemon,
        "binding": state.binding,
        "rounds": state.rounds,
        "subject": state.subject,
    }


class Rounds:
    """
    The round records of one daemon (L{mcpx.server.asking.Asking} keeps one).

    @ivar daemon: this daemon's id: states it issues name it, and their nonces start with it.
    @ivar serve: resumes a call this daemon holds for a retry taken elsewhere.
    """

    def __init__(
        self,
        clock: IReactorTime,
        daemon: str,
        records: RecordStore | None = None,
        *,
        wait: float = 900.0,
        every: float = EVERY,
        timeout: float = TIMEOUT,
    ) -> None:
        """
        @param records: the store the records go through; C{None} keeps them in memory.
        @param wait: how long a relayed retry waits for the owner at most.
        """
        self.daemon = daemon
        self.serve: Serve | None = None
        self._clock = clock
        self._records = records
        self._wait = wait
        self._every = every
        self._timeout = timeout
        self._memory: dict[str, tuple[str, float]] = {}
        self._next_prune = 0.0
        #: Relayed retries waiting for their owner's reply, by nonce.
        self._waiting: dict[str, Deferred[Mapping[str, Any]]] = {}
        #: Claims of this daemon's calls being served, by nonce.
        self._serving: set[str] = set()
        #: The next look at each relayed retry (L{_check}).
        self._timers: dict[str, IDelayedCall] = {}
        self._writes = Writes()
        self._listening = False
        self._stopped = False
        #: The next try of a read that failed (L{_background}).
        self._retry: IDelayedCall | None = None

    def listen(self) -> None:
        """Hear what other daemons write (once the store is open)."""
        if self._records is not None and not self._listening:
            self._listening = True
            self._records.listen(self._heard)

    def nonce(self) -> str:
        """A new state's nonce: this daemon's id and 16 hex digits."""
        return f"{self.daemon}.{secrets.token_hex(8)}"

    # Issuing and using states

    def issued(self, state: RequestState) -> Deferred[None]:
        """Record C{state} as issued; fires once it is (a retry may come at once)."""
        now = self._clock.seconds()
        if self._records is None:
            if now >= self._next_prune:
                self._next_prune = now + 60.0
                self._memory = {
                    nonce: entry for nonce, entry in self._memory.items() if entry[1] >= now
                }
            self._memory[state.nonce] = (ISSUED, state.expires)
            return succeed(None)
        body = _round_body(state)
        written = self._records.put(
            ROUNDS, Record(state.nonce, state.subject, ISSUED, state.expires, json.dumps(body))
        )
        if now >= self._next_prune:
            self._next_prune = now + 60.0
            self._background(self._prune(now), "forget the expired requestState rounds")
        return written

    async def _prune(self, now: float) -> None:
        assert self._records is not None
        await self._records.prune(ROUNDS, now, keep="")

    async def claim(self, state: RequestState, responses: Mapping[str, Any]) -> None:
        """
        Take C{state}'s round for this retry, once in the fleet.

        @raise RpcError: it was taken already (or is not known).
        """
        if self._records is None:
            entry = self._memory.get(state.nonce)
            if entry is None or entry[0] != ISSUED:
                raise _used()
            self._memory[state.nonce] = (CLAIMED, entry[1])
            return
        body = {**_round_body(state), "claimant": self.daemon, "responses": dict(responses)}
        taken = await self._records.put_if(
            ROUNDS,
            Record(state.nonce, state.subject, CLAIMED, state.expires, json.dumps(body)),
            ISSUED,
        )
        if not taken:
            raise _used()

    # A retry for a call another daemon holds

    async def relay(self, state: RequestState, responses: Mapping[str, Any]) -> Mapping[str, Any]:
        """
        What the daemon holding C{state}'s call answers this retry, through the store.

        @raise RpcError: there is no shared store, the owner is gone (before or while
            waiting), the state was used, or the owner's answer was an error.
        """
        records = self._records
        if records is None or not self._listening:
            raise RpcError.internal_error(
                f"the call this requestState resumes is held by the mcpx daemon process "
                f"{state.daemon or 'that issued it'} (another daemon, or this one before it "
                "restarted), which cannot be reached without a shared store (store.url): "
                "send the request again without requestState"
            )
        now = self._clock.seconds()
        if state.daemon not in await records.alive(now - self._timeout):
            raise _gone(state.daemon)
        replied: Deferred[Mapping[str, Any]] = Deferred(lambda _: self._forget(state.nonce))
        self._waiting[state.nonce] = replied
        try:
            await self.claim(state, responses)
        except BaseException:
            self._forget(state.nonce)
            raise
        timer = self._clock.callLater(self._every, self._check, state, now + self._wait)
        self._timers[state.nonce] = timer
        return await replied

    def _background(
        self,
        work: Coroutine[Any, Any, Any],
        what: str,
        again: Callable[[], Coroutine[Any, Any, Any]] | None = None,
    ) -> None:
        """
        Run C{work}, which nobody waits for.  A store closed under it (the daemon is
        stopping) is no error; a store that failed it (restarting, say) is a warning,
        and C{again}, if given, is run L{EVERY} seconds later in its place.
        """

        async def quietly() -> None:
            if self._stopped:
                work.close()
                return
            try:
                await work
            except StoreClosed:
                return
            except Exception as e:
                log.warn("could not {what}: {error}; trying again", what=what, error=str(e))
                if again is not None and not self._stopped:
                    self._retry = self._clock.callLater(
                        self._every, self._background, again(), what, again
                    )

        self._writes.track(Deferred.fromCoroutine(quietly()), what)

    def _forget(self, nonce: str) -> None:
        self._waiting.pop(nonce, None)
        timer = self._timers.pop(nonce, None)
        if timer is not None and timer.active():
            timer.cancel()

    def _check(self, state: RequestState, give_up: float) -> None:
        """Look at a relayed retry again: replied, owner gone, waited too long."""
        self._timers.pop(state.nonce, None)
        if state.nonce not in self._waiting:
            return
        self._background(self._checked(state, give_up), "look at a relayed retry")

    async def _checked(self, state: RequestState, give_up: float) -> None:
        assert self._records is not None
        if await self._look(state.nonce):
            return
        now = self._clock.seconds()
        if state.daemon not in await self._records.alive(now - self._timeout):
            self._fail(state.nonce, _gone(state.daemon))
            return
        if now >= give_up:
            self._fail(
                state.nonce,
                RpcError.internal_error(
                    f"the mcpx daemon {state.daemon} holding the call did not answer this "
                    "retry within proto.askTTL: send the request again without requestState"
                ),
            )
            return
        if state.nonce in self._waiting:
            self._timers[state.nonce] = self._clock.callLater(
                self._every, self._check, state, give_up
            )

    def _fail(self, nonce: str, error: RpcError) -> None:
        waiter = self._waiting.get(nonce)
        self._forget(nonce)
        if waiter is not None and not waiter.called:
            waiter.errback(error)

    async def _look(self, nonce: str) -> bool:
        """Read a waited-for round; answer its retry if it was replied to."""
        assert self._records is not None
        record = await self._records.get(ROUNDS, nonce)
        if record is None or record.state != REPLIED:
            return False
        waiter = self._waiting.get(nonce)
        self._forget(nonce)
        if waiter is None or waiter.called:
            return True
        reply = json.loads(record.body).get("reply", {})
        error = reply.get("error")
        if isinstance(error, dict):
            waiter.errback(RpcError.from_json(error))
        else:
            waiter.callback(reply.get("result", {}))
        return True

    # The owner's side

    def _heard(self, kind: str | None, record_id: str | None) -> None:
        if kind is None:
            # Notices may have been missed: look at everything of interest again.
            for nonce in list(self._waiting):
                self._background(self._look(nonce), "read a round")
            self._background(self._scan(), "read the rounds taken for this daemon", self._scan)
            return
        if kind != ROUNDS or record_id is None:
            return
        if record_id in self._waiting:
            self._background(self._look(record_id), "read a round")
        elif record_id.startswith(self.daemon + ".") and record_id not in self._serving:
            self._background(self._serve_claimed(record_id), "resume a call")

    async def _scan(self) -> None:
        assert self._records is not None
        for record in await self._records.find(ROUNDS, state=CLAIMED):
            if record.id.startswith(self.daemon + ".") and record.id not in self._serving:
                await self._serve_claimed(record.id, record)

    async def _serve_claimed(self, nonce: str, record: Record | None = None) -> None:
        records = self._records
        assert records is not None
        if record is None:
            record = await records.get(ROUNDS, nonce)
        if record is None or record.state != CLAIMED or nonce in self._serving:
            return
        body = json.loads(record.body)
        if body.get("claimant") == self.daemon or self.serve is None:
            # Taken here: the retry is answered here, not through the store.
            return
        self._serving.add(nonce)
        try:
            claim = Claim(
                str(body["call"]),
                str(body["binding"]),
                int(body["rounds"]),
                body.get("subject"),
                dict(body.get("responses") or {}),
            )
            reply: dict[str, Any]
            try:
                result = await self.serve(claim)
                json.dumps(result)
                reply = {"result": result}
            except RpcError as e:
                reply = {"error": e.to_json()}
            except CancelledError:
                reply = {"error": RpcError.internal_error("the call was cancelled").to_json()}
            except Exception as e:
                log.failure("resuming the call {call} for another daemon", call=claim.call)
                reply = {"error": RpcError.internal_error(str(e)).to_json()}
            body["reply"] = reply
            await records.put_if(
                ROUNDS,
                Record(nonce, record.principal, REPLIED, record.finished, json.dumps(body)),
                CLAIMED,
            )
        finally:
            self._serving.discard(nonce)

    def stop(self) -> Deferred[None]:
        """Stop looking at relayed retries; fires once the writes under way have ended."""
        self._stopped = True
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        for nonce in list(self._waiting):
            self._fail(nonce, RpcError.internal_error("the mcpx daemon is stopping"))
        return self._writes.settled()
