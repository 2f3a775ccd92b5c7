# -*- test-case-name: tests.pool.test_attribution -*-
"""
Attribution: which call a question asked on an upstream connection belongs to.

A question belongs to a call only when every request in flight on its connection is
that call's (L{Attribution.owner}); a request made for nobody that is alone in flight
owns the questions asked meanwhile all the same (L{Attribution.lone_request}).  A
C{shared} server that asked a question during a request is known from then on to ask:
each call made for a caller gets an instance to itself, up to
C{pool.maxAskingInstances} (keys C{ask-1}, C{ask-2}, ...; L{Attribution.slot_for}).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable

from attrs import define, field

from mcpx.call import Call
from mcpx.lasting import Lasting
from mcpx.once import Calls
from mcpx.pool.budget import Deadline
from mcpx.pool.instance import POOL_LOG, Instance, Slot, mirrored_scope, own_scope
from mcpx.pool.instances import Instances
from mcpx.settings.servers import Scope
from mcpx.spec.revision import Era
from mcpx.upstream.handlers import mark_of

#: How many instances a shared server known to ask may run, one per asking call.
DEFAULT_MAX_ASKING_INSTANCES = 32

#: The setting that caps them.
MAX_ASKING_INSTANCES_SETTING = "pool.maxAskingInstances"

#: The scope keys of a shared server's instances of their own for asking calls.
ASKING_PREFIX = "ask-"


@define(eq=False, slots=True)
class NobodysRequest:
    """
    A request made for nobody that was alone in flight on its connection when its
    server asked: the questions asked then are its own, and those still waiting when
    the request ends (answered, failed, or given up on: its client cancelled it or
    went) are withdrawn.

    @ivar id: names the request in the questions' records (their C{call_id}); made
        when the server first asks, so a request that asks nothing costs nothing.
    """

    id: str
    deadline: Deadline
    _on_end: Calls = field(factory=Calls)

    def on_end(self, withdraw: Callable[[], None]) -> None:
        """Have C{withdraw} called when the request ends."""
        self._on_end.add(withdraw)

    def ended(self) -> None:
        self._on_end.run()


def _asks_on_its_connection(instance: Instance) -> bool:
    """Whether C{instance}'s server asks on its connection (the handshake era)."""
    session = instance.session
    return session is not None and session.era is Era.LEGACY


def same_host(one: Call | None, other: Call) -> bool:
    """Whether two calls were made by one host (both known, see L{Call.host})."""
    return one is not None and one.host is not None and one.host == other.host


class Attribution:
    """Whom the requests on each connection are for, and which servers ask."""

    def __init__(self, instances: Instances, *, max_asking_instances: int) -> None:
        if max_asking_instances < 1:
            raise ValueError(
                f"max_asking_instances must be at least 1, not {max_asking_instances!r}"
            )
        self.log = POOL_LOG
        self._instances = instances
        self._max_asking_instances = max_asking_instances
        #: The shared servers known to ask questions on their connections.
        self._asking: set[str] = set()
        #: The asking servers whose cap made calls share an instance since one was free.
        self._asking_full: Lasting[str] = Lasting()
        #: The request made for nobody that its server asked while it was alone in
        #: flight on an instance, until it ends (see L{lone_request}).
        self._lone: dict[Instance, NobodysRequest] = {}
        # Named apart from another daemon's (questions outlive a restart).
        self._request_prefix = f"request-{secrets.token_hex(4)}-"
        self._request_numbers = itertools.count(1)

    def owner(self, server: str, scope_key: str) -> Call | None:
        """
        The one call every request in flight on (C{server}, C{scope_key}) is for, or
        C{None} when there is none or several, or a request that is nobody's (which
        includes a request mcpx gave up on that its server has not answered yet, for
        up to C{pool.cancelGrace}): a question arriving on that connection belongs to
        that call, and to no other.

        A request given up on that the same host made (L{same_host}) does not count: a
        server may never answer a cancelled request (the TypeScript SDK does not), and
        a question it asks for it all the same can only reach the host that made it.

        Asked when a question arrives: one that finds several calls in flight, or one
        call on a handshake-era connection, teaches the pool that the server asks (a
        C{shared} one then gives a call that would share an instance with another one
        of its own, see L{mcpx.pool.pool.Pool.call_tool}), before two calls' questions
        can meet there.
        """
        instance = self._instances.slots.find(server, scope_key)
        if instance is None:
            return None
        calls = instance.calls
        late = instance.late
        if late and calls and calls[0] is not None:
            mine = calls[0]
            late -= sum(1 for other in instance.late_calls() if same_host(other, mine))
        if not calls or late:
            if len(calls) + late > 1:
                self._learn_asking(instance)
            return None
        first = calls[0]
        for other in calls:
            if other is not first:
                self._learn_asking(instance)
                return None
        if first is not None and _asks_on_its_connection(instance):
            # Asked on its connection in one call (a handshake-era server), the server
            # is known to ask from now on: a call that would share this instance with
            # another then gets one of its own, so its question is not one arriving
            # among two calls, tied to neither.  (A 2026-07-28 server asks inside its
            # results, where the call is known: nothing to learn from one call.)
            self._learn_asking(instance)
        return first

    def lone_request(self, server: str, scope_key: str) -> NobodysRequest | None:
        """
        The request in flight on (C{server}, C{scope_key}) when it is the only one, is
        made for nobody, and no request mcpx gave up on may still be running there: a
        question arriving on that connection is that request's (the rule of L{owner},
        for a request with no caller to put the question to).  The same record is
        returned for each question it asks; L{NobodysRequest.on_end} withdraws those
        still waiting when the request ends.

        @return: C{None} when the question cannot be tied to one such request.
        """
        instance = self._instances.slots.find(server, scope_key)
        if instance is None:
            return None
        calls, deadlines = instance.calls, instance.deadlines
        # A request is counted (its call listed) a moment before its deadline is set:
        # one asking in between is left unattributed rather than guessed.
        if len(calls) != 1 or calls[0] is not None or len(deadlines) != 1:
            return None
        if instance.late:
            return None
        [deadline] = deadlines
        lone = self._lone.get(instance)
        if lone is None or lone.deadline is not deadline:
            lone = self._lone[instance] = NobodysRequest(
                f"{self._request_prefix}{next(self._request_numbers)}", deadline
            )
        return lone

    def calls(self, server: str, scope_key: str) -> list[Call | None]:
        """The calls the requests in flight on (C{server}, C{scope_key}) are for, in order."""
        instance = self._instances.slots.find(server, scope_key)
        return list(instance.calls) if instance is not None else []

    def _learn_asking(self, instance: Instance) -> None:
        name = instance.name
        if name in self._asking or instance.slot.config.scope is not Scope.SHARED:
            return
        self._asking.add(name)
        self.log.info(
            "upstream {server} asked a question during a call; from now on a call that "
            "would share its instance with another gets one of its own, up to {limit} "
            "({setting}), so its questions reach the right client",
            server=name,
            limit=self._max_asking_instances,
            setting=MAX_ASKING_INSTANCES_SETTING,
        )

    def slot_for(
        self, server: str, client: str, call: Call | None, *, legacy: bool = False
    ) -> Slot:
        """
        The slot a request for C{call} runs on: the server's own, unless it is a shared
        server known to ask, when a call made for a caller gets an instance nobody else
        is using (an idle one first, else a new one under C{pool.maxAskingInstances}).

        @param legacy: the call is met in the legacy era (era mirroring): the same, among
            the legacy-era slots (C{pool.maxAskingInstances} counts both eras' together).
        """
        slots = self._instances.slots
        if not legacy and (call is None or server not in self._asking):
            # The server's own slot: that of the instance running there, when one does
            # (Slots.running, kept from the call's route and policy).
            running = slots.running(server, client)
            if running is not None:
                return running.slot
        slot = slots.slot(server, client, legacy=legacy)
        if call is None or server not in self._asking or slot.config.scope is not Scope.SHARED:
            return slot
        running = slot.instance
        if (
            running is not None
            and running.session is not None
            and not _asks_on_its_connection(running)
        ):
            # A 2026-07-28 connection: its server asks inside its results, where the
            # call is known, so calls share it (the legacy-era instances of a dual-era
            # server are the ones that get instances of their own).
            return slot
        by_scope = self._instances.slots.of(server)
        now = self._instances.clock.seconds()
        prefix = mirrored_scope(ASKING_PREFIX) if legacy else ASKING_PREFIX
        # Among the instances declaring what this call's host declares (its mark).
        mark = mark_of(slot.key[1])
        asking = [
            s for key, s in by_scope.items() if key.startswith(prefix) and mark_of(key) == mark
        ]
        either = sum(1 for key in by_scope if own_scope(key).startswith(ASKING_PREFIX))
        # The server's own slot last: it also serves the catalogue and callers' strangers.
        for candidate in (*asking, slot):
            if candidate.retry_at is not None and candidate.retry_at > now:
                # Backing off after a crash: no new instance is spawned around it.
                return slot
        for candidate in (*asking, slot):
            if self._instances.free(candidate):
                return candidate
        if either + 1 >= self._max_asking_instances:
            if self._asking_full.begins(server):
                self.log.warn(
                    "upstream {server}: all {limit} instances are busy with asking calls "
                    "({setting}); calls share instances again, and a question they ask "
                    "may wait in the broker (mcpx elicit)",
                    server=server,
                    limit=self._max_asking_instances,
                    setting=MAX_ASKING_INSTANCES_SETTING,
                )
            return slot
        self._asking_full.ends(server)
        number = next(n for n in itertools.count(1) if f"{prefix}{n}{mark}" not in by_scope)
        key = f"{prefix}{number}{mark}"
        return self._instances.slots.add((server, key), slot.config)

    def hold_deadlines(self, server: str, scope_key: str) -> Callable[[], None]:
        """
        Stop the C{pool.callTimeout} clocks of the requests in flight on (C{server},
        C{scope_key}) while a question is pending; the returned function starts them
        again (call it once).
        """
        instance = self._instances.slots.find(server, scope_key)
        held = list(instance.deadlines) if instance is not None else []
        for deadline in held:
            deadline.pause()

        def release() -> None:
            for deadline in held:
                deadline.resume()

        return release

    def request_ended(self, instance: Instance, deadline: Deadline) -> None:
        """
        The request on C{instance} bounded by C{deadline} ended (answered, failed,
        given up on): if it was the request made for nobody whose questions are its
        own, what it asked that still waits is withdrawn, as a caller's is
        (L{mcpx.call.Call.call_ended}).
        """
        lone = self._lone.get(instance)
        if lone is not None and lone.deadline is deadline:
            del self._lone[instance]
            lone.ended()
