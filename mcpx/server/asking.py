# -*- test-case-name: tests.server.test_asking -*-
"""
The calls whose upstream may ask their client something on the way (C{tools/call},
C{prompts/get}, C{resources/read}), where they meet the MCP server.

Each such request gets a L{Call} when its client may be asked or declares upstream
on its own (L{Asking.call_for}).  A legacy client is asked on its connection
(L{mcpx.server.resumable.ConnAsker}); a 2026-07-28 client is answered
C{input_required} with its questions and a signed C{requestState}
(L{mcpx.server.request_state}), and resumes with the answers (L{Asking.round}).  A call
that asked its client outlives its request: it is kept, as a task, until collected
(L{Asking.promote}).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Awaitable, Iterator, Mapping
from typing import Any, Final

from attrs import define, field
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.auth.caller import subject_identity
from mcpx.call import Call
from mcpx.ops.host import OpHost
from mcpx.server.conn import Conn, Context
from mcpx.server.offering import Offering
from mcpx.server.request_state import KeyRing, RequestState, StateSigner, binding
from mcpx.server.resumable import ConnAsker, ResumableCall, waiting
from mcpx.server.rounds import Claim, Rounds
from mcpx.server.tasks import CoreTasks
from mcpx.spec.apps import declared_ui
from mcpx.spec.matrix import capability_in
from mcpx.spec.questions import CAPABILITY_FOR
from mcpx.spec.revision import Revision
from mcpx.store.heartbeat import new_daemon_id
from mcpx.store.records import RecordStore
from mcpx.wire.errors import RpcError

log = Logger()

#: The question capabilities (elicitation, sampling, roots) each revision lacks.
_ABSENT_QUESTIONS: Final[Mapping[Revision, frozenset[str]]] = {
    revision: frozenset(
        name for name in CAPABILITY_FOR.values() if not capability_in("client", name, revision)
    )
    for revision in Revision
}

#: Every question capability (elicitation, sampling, roots).
_QUESTIONS: Final = frozenset(CAPABILITY_FOR.values())


def _input_responses(params: dict[str, Any]) -> dict[str, Any]:
    """A retry's C{inputResponses}, or none when it sent no object."""
    responses = params.get("inputResponses")
    return responses if type(responses) is dict else {}


def task_error(failure: Failure, call: ResumableCall) -> dict[str, Any]:
    """A resumable call's failure, as its task shows it."""
    error = failure.value
    if isinstance(error, RpcError):
        return error.to_json()
    if isinstance(error, CancelledError):
        why = call.abandoned or "the call was cancelled before it finished"
        return {"code": -32603, "message": why}
    return {"code": -32603, "message": failure.getErrorMessage()}


@define(eq=False, slots=False)
class Asking:
    """
    The question relay's side in one MCP server: the calls of its requests, and the
    2026-07-28 calls that asked their client something, by id, until collected.
    """

    _host: OpHost
    _clock: IReactorTime
    _offering: Offering
    _core_tasks: CoreTasks
    #: The keys its C{requestState}s are signed with (L{state_keys}).
    _keys: KeyRing
    _native: bool = field(init=False)
    _rounds: int = field(init=False)
    _state_ttl: float = field(init=False)
    _ask_ttl: float = field(init=False)
    _signer: StateSigner = field(init=False)
    _call_prefix: str = field(factory=lambda: f"call-{secrets.token_hex(4)}-", init=False)
    _call_numbers: Iterator[int] = field(factory=lambda: itertools.count(1), init=False)
    _resumables: dict[str, ResumableCall] = field(factory=dict, init=False)
    #: The one-time records of the states this daemon issues (in memory until L{share}).
    rounds: Rounds = field(init=False)

    def __attrs_post_init__(self) -> None:
        settings = self._host.settings
        self._native = settings.boolean("proto.native")
        self._rounds = settings.integer("proto.askRounds")
        self._state_ttl = settings.duration("proto.stateTTL")
        self._ask_ttl = settings.duration("proto.askTTL")
        self._signer = StateSigner(ring=self._keys)
        self.rounds = Rounds(self._clock, new_daemon_id(), wait=self._ask_ttl)
        self.rounds.serve = self._serve_claim

    def share(self, records: RecordStore, daemon: str) -> None:
        """
        Keep the round records in C{records}, shared with the daemons of a fleet, as the
        daemon C{daemon} (its heartbeat's id); retries for calls held elsewhere are
        relayed through it.  Before the daemon serves anyone.
        """
        self.rounds = Rounds(self._clock, daemon, records, wait=self._ask_ttl)
        self.rounds.serve = self._serve_claim
        self.rounds.listen()

    async def asked(
        self,
        conn: Conn,
        forwarded: Awaitable[Mapping[str, Any]],
        context: Context,
        params: dict[str, Any],
        method: str,
    ) -> Mapping[str, Any]:
        """
        The answer of a call whose client may be asked (its call has an asker),
        C{forwarded} its work: a 2026-07-28 client is answered C{input_required} with
        its call's questions (L{round}); a legacy client is asked on its connection,
        and its call outlives the request once it asked.
        """
        call = context.call
        assert call is not None

        async def run() -> Mapping[str, Any]:
            return await forwarded

        if context.modern:
            resumable = call.asker
            assert isinstance(resumable, ResumableCall)
            resumable.run(Deferred.fromCoroutine(run()))
            # Until it asks, the call is the request's: its going cancels the call.
            await waiting(resumable, lambda: None if call.is_task else resumable.cancel())
            return await self.round(resumable, context, params, 0)
        # A legacy client is asked on its connection.  If it cancels the call, the
        # call is cancelled upstream and its questions are withdrawn; if it stops
        # waiting otherwise (its connection went) once the call has asked something,
        # the call runs on as a task.
        held = ResumableCall(call, method, self._clock)
        held.run(Deferred.fromCoroutine(run()))
        if conn.calling is not None and context.request_id is not None:
            # The client's notifications/cancelled withdraws the call before its request
            # is cancelled: it is then not asking any more, and stops.
            conn.calling(context.request_id, call)
        if context.task is not None:
            # A core task is cancelled by tasks/cancel, and then it stops for good,
            # its questions withdrawn wherever they were put.
            def cancelled() -> None:
                # Withdrawn before the call is cut: the server then hears the answer a
                # withdrawn question gets (cancel), not the cancellation of its wait.
                call.withdraw()
                held.cancel()

            await waiting(held, cancelled)
            return held.result()  # type: ignore[no-any-return]

        def stopped() -> None:
            # Still asking: its client went without cancelling it (a cancel withdrew it).
            if call.asked:
                self.promote(held)
                return
            # Withdrawn first, as above.
            call.withdraw()
            held.cancel()

        await waiting(held, stopped)
        return held.result()  # type: ignore[no-any-return]

    def call_for(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        method: str,
        *,
        as_task: bool = False,
        narrow: bool | None = None,
    ) -> Call | None:
        """
        The L{Call} of one request, or C{None} when nothing about it needs one (a
        client that declares nothing, outside pass-through and outside a task: the
        fast path).  A core task always has one, so that cancelling it withdraws the
        questions its call asked (L{Call.call_ended}).

        @param as_task: the call may become a task of the tasks extension.
        @param narrow: whether C{conn} is served a pass-through (L{Offering.serving}),
            where the caller has looked already for this request; C{None}: looked up.
        """
        capabilities = context.capabilities
        # Set operations on the keys, asked of every call: no generator of their own.
        absent = _ABSENT_QUESTIONS[context.revision]
        if absent and not absent.isdisjoint(capabilities):
            # A capability the revision lacks (elicitation before 2025-06-18) is no
            # promise: such a client has no schema for the question.
            capabilities = {
                name: value for name, value in capabilities.items() if name not in absent
            }
        askable = self._native and not _QUESTIONS.isdisjoint(capabilities)
        modern = context.modern
        held = params.get("inputResponses") if modern else None
        if narrow is None:
            narrow = self._offering.serving(conn) is not None
        as_task = as_task or context.task is not None
        if (
            not (askable or narrow or as_task)
            and type(held) is not dict
            # A host's MCP Apps declaration travels upstream with its calls (modern_session).
            and declared_ui(capabilities) is None
        ):
            return None
        subject = context.subject
        # Positional, as L{Context.with_call}: the keywords cost a third of the
        # construction.  In L{Call}'s order: id, capabilities, asker, narrow, held,
        # wants_task, on_upstream_task, strict, refused, owner, host, legacy.
        call = Call(
            self._call_prefix + str(next(self._call_numbers)),
            capabilities,
            None,
            narrow,
            dict(held) if type(held) is dict else None,
            as_task,
            None,
            modern and narrow,
            None,
            # Whose its questions are: the access token's subject's.
            subject_identity(subject) if subject is not None else None,
            # Who made it: its connection or named session, and its token's subject.
            f"{subject or ''}\n{context.artifact_owner}",
            not modern,
        )
        if context.task is not None:
            call.became_task()
        if askable:
            if modern:
                call.asker = ResumableCall(call, method, self._clock)
            elif conn.ask is not None:
                call.asker = ConnAsker(conn, context.reply)
                if context.task is not None:
                    call.asker = self._core_tasks.asker_for(context.task, call.asker)
        return call

    async def round(
        self, call: ResumableCall, context: Context, params: dict[str, Any], rounds: int
    ) -> Mapping[str, Any]:
        """
        What a 2026-07-28 request is answered once its call has finished or asks.

        @param rounds: the rounds the request's state counted; the call keeps its own
            count too, so resending an older state cannot reset it.
        """
        return await self._round(call, context.subject, binding(call.method, params), rounds)

    async def _round(
        self, call: ResumableCall, subject: str | None, bound: str, rounds: int
    ) -> Mapping[str, Any]:
        """L{round}, for a request bound as C{bound} and made by C{subject}."""
        if call.done:
            if call.abandoned is not None:
                raise RpcError.internal_error(call.abandoned)
            try:
                return call.result()  # type: ignore[no-any-return]
            except CancelledError:
                raise RpcError.internal_error("the call was cancelled before it finished") from None
        rounds = max(rounds, call.rounds) + 1
        call.rounds = rounds
        if rounds > self._rounds:
            call.abandoned = (
                f"the call was still asking after {self._rounds} rounds "
                "(proto.askRounds); it was abandoned"
            )
            call.cancel()
            raise RpcError.internal_error(call.abandoned)
        self.promote(call)
        now = self._clock.seconds()
        state = RequestState(
            call.id,
            bound,
            rounds,
            now + self._state_ttl,
            subject,
            self.rounds.nonce(),
            self.rounds.daemon,
        )
        # Asked for while the call still asks: the questions of this round.
        asking = call.asking()
        await self.rounds.issued(state)
        return {
            "resultType": "input_required",
            "inputRequests": asking,
            "requestState": self._signer.issue(state, now),
        }

    def promote(self, call: ResumableCall) -> None:
        """The call asked its client: it outlives the request, as a task until collected."""
        if call.call.is_task:
            return
        call.call.became_task()
        self._resumables[call.id] = call
        try:
            self._host.tasks.adopt(
                call.id, call.outcome(), lambda failure: task_error(failure, call)
            )
        except Exception:
            log.failure("the call {call} could not be kept as a task", call=call.id)

        def forget(_: object) -> None:
            # Kept for retries and collection a while after it ends, then forgotten.
            self._clock.callLater(self._ask_ttl, self._resumables.pop, call.id, None)

        call.outcome().addBoth(forget)

    def verified(self, context: Context, params: dict[str, Any], method: str) -> RequestState:
        """The state a retry carries, verified for it (L{StateSigner.verify})."""
        return self._signer.verify(
            params.get("requestState"), method, params, self._clock.seconds(), context.subject
        )

    def held_elsewhere(self, state: RequestState) -> bool:
        """Whether C{state}'s call is held by another daemon (or an earlier process)."""
        return bool(state.daemon) and state.daemon != self.rounds.daemon

    async def relay(self, state: RequestState, params: dict[str, Any]) -> Mapping[str, Any]:
        """A retry for a call another daemon holds, answered by it (L{Rounds.relay})."""
        return await self.rounds.relay(state, _input_responses(params))

    async def resumed(
        self, context: Context, params: dict[str, Any], state: RequestState
    ) -> tuple[ResumableCall, int]:
        """
        The call this daemon holds that a retry's verified C{state} names, given the
        retry's answers once the state is used (once); its rounds.
        """
        call = self._held(state.call)
        answers = _input_responses(params)
        if state.nonce:
            await self.rounds.claim(state, answers)
        call.answer(answers)
        return call, state.rounds

    def _held(self, call_id: str) -> ResumableCall:
        """
        The call a state names, which this daemon holds.

        @raise RpcError: the call ended and was forgotten (after C{proto.askTTL}).
        """
        call = self._resumables.get(call_id)
        if call is None:
            raise RpcError.invalid_params(
                "requestState names a call mcpx no longer holds (it ended and was forgotten "
                f"after proto.askTTL, {self._ask_ttl:g}s): send the request again without "
                "requestState"
            )
        return call

    async def resume(
        self, context: Context, params: dict[str, Any], method: str
    ) -> Mapping[str, Any]:
        """A 2026-07-28 retry with the C{requestState} of a call that asked."""
        state = self.verified(context, params, method)
        if self.held_elsewhere(state):
            return await self.relay(state, params)
        call, rounds = await self.resumed(context, params, state)
        # The call is no longer the request's: a retry that goes away leaves it running.
        await waiting(call, lambda: None)
        return await self.round(call, context, params, rounds)

    async def _serve_claim(self, claim: Claim) -> Mapping[str, Any]:
        """A retry another daemon took for a call held here: the call's next answer."""
        call = self._held(claim.call)
        call.answer(claim.responses)
        await waiting(call, lambda: None)
        return await self._round(call, claim.subject, claim.binding, claim.rounds)
