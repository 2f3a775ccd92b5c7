# -*- test-case-name: tests.pool.test_pool -*-
"""
The warm pool: upstream servers started once and kept running between calls.

Every call names a server and comes from a caller.  A C{shared} server has one
instance, which every caller uses; a C{client}-scoped one has an instance per caller.
Either way an instance is keyed by (server, scope key), where the scope key is the
caller's identity for a C{client} server and C{""} for a shared one.

An instance's life:

  - It is started by the first call that needs it.  Calls that arrive while it starts
    wait for that one start: a server is never spawned twice for one key.
  - It stays warm while it is used, and is reaped once no call has used it for
    C{idle_timeout} (never while a request is in flight or anyone wants a resource's
    updates from it).
  - If it dies, the call that was running fails with L{ServerUnavailable} naming the
    server and how it ended, and the next call starts a fresh one, after a delay that
    doubles with each crash in a row (L{Backoff}); a call that arrives before then
    fails at once, saying when the next start will be.
  - L{Pool.restart}, L{Pool.reload} and stopping the service close instances on
    purpose; a call they cut short says so.
  - A C{client}-scoped server runs at most C{pool.maxClientInstances} instances.  A
    new caller beyond that takes the place of the least recently used idle one, which
    is stopped first (its process is gone before the new one is spawned); when every
    one is busy the call fails at once with L{TooManyInstances}.
  - A C{shared} server that asked a question on its connection while several calls
    were in flight (so the question could not be given to any of them) is known from
    then on to ask: each call made for a caller gets an instance to itself, an idle one
    reused or a new one, up to C{pool.maxAskingInstances} for that server (keys
    C{ask-1}, C{ask-2}, ...); past that, calls share again.  See L{owner}.
  - A request mcpx gave up on (cancelled, timed out) still counts on its connection,
    as nobody's, until the server answers it or C{pool.cancelGrace} passes: a server
    may go on asking for it, and such a question is nobody's to answer.
  - A request made for nobody (its client declared nothing it could be asked: the
    fast path, with no caller) that is alone in flight on its connection when its
    server asks owns the question all the same (L{lone_request}): the question is named
    after it, and withdrawn if it still waits when the request ends.

Resource subscriptions are counted per key and URI, whoever holds them (each
connection, listen stream, legacy session or event stream that watches a resource
holds one interest): the first interest subscribes upstream, the last one released
unsubscribes.  Interests belong to the key, not to an instance, so an instance that
ends while they are wanted (a crash, L{Pool.restart}, L{Pool.reload}) is replaced
at once, after a crash's back-off, and every wanted URI is subscribed again on the
new instance; a replacement that fails is retried on the same back-off.

Each change is published as an event (C{server.starting}, C{server.started},
C{server.exited}, C{server.failed}, C{server.reaped}, C{server.restarted}), with
upstream log messages (C{server.log}), progress (C{progress}) and the updates of
subscribed resources (C{resource.updated}).

The catalogue of an instance (tools, prompts, resources, resource templates) is
listed once and cached until the server says the list changed.

How long a call may take is decided in L{mcpx.pool.budget}.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final, Generic, Protocol, TypeAlias, TypeVar

from attrs import define, evolve, field, frozen
from twisted.application.service import MultiService
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred, fail, gatherResults
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.pool.backoff import Backoff
from mcpx.pool.budget import Deadline, effective_call_timeout
from mcpx.pool.errors import (
    AnswerTooLarge,
    CallTimedOut,
    ServerUnavailable,
    TooManyInstances,
    UnknownServer,
    UpstreamBroke,
    format_seconds,
    masked_rpc_error,
)
from mcpx.pool.status import ReloadReport, ServerState, ServerStatus
from mcpx.settings.resolve import Settings
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.servers import Scope, Server, ServersConfig, StdioServer
from mcpx.upstream.channel import ChannelClosed, MessageTooLarge, TransportRefused
from mcpx.upstream.handlers import NO_HANDLERS, UpstreamHandlers
from mcpx.upstream.session import UpstreamSession
from mcpx.wire.errors import RpcError
from mcpx.wire.peer import ConnectionClosed

T = TypeVar("T")

#: An instance's key: (server name, scope key).
Key: TypeAlias = tuple[str, str]
Publish: TypeAlias = Callable[..., None]
HandlersFor: TypeAlias = Callable[[str, str], UpstreamHandlers]
ProgressSink: TypeAlias = Callable[[dict[str, Any]], None]


class Connects(Protocol):
    """What the pool needs of a L{mcpx.upstream.probe.Connector}: open sessions."""

    def connect(
        self, name: str, server: Server, handlers: UpstreamHandlers
    ) -> Coroutine[Any, Any, UpstreamSession]:
        """An open session to C{server}, or an error naming it."""


def _no_events(kind: str, server: str | None = None, **data: Any) -> None:
    """The default publisher: events go nowhere."""


@frozen
class _Catalogue:
    """One of the lists a server offers, and how to fetch it."""

    kind: str
    method: str
    capability: str
    fetch: Callable[[UpstreamSession], Coroutine[Any, Any, list[dict[str, Any]]]]


_CATALOGUES: Mapping[str, _Catalogue] = {
    c.kind: c
    for c in (
        _Catalogue("tools", "tools/list", "tools", lambda s: s.list_tools()),
        _Catalogue("prompts", "prompts/list", "prompts", lambda s: s.list_prompts()),
        _Catalogue("resources", "resources/list", "resources", lambda s: s.list_resources()),
        _Catalogue(
            "templates",
            "resources/templates/list",
            "resources",
            lambda s: s.list_resource_templates(),
        ),
    )
}

#: The catalogues each list_changed notification makes stale.
_STALE_AFTER: Mapping[str, tuple[str, ...]] = {
    "notifications/tools/list_changed": ("tools",),
    "notifications/prompts/list_changed": ("prompts",),
    "notifications/resources/list_changed": ("resources", "templates"),
}

_SUBSCRIBE = "resources/subscribe"
_UNSUBSCRIBE = "resources/unsubscribe"

_STOPPING = "mcpx is shutting down"

#: How many instances a C{client}-scoped server may run when nothing says otherwise.
DEFAULT_MAX_CLIENT_INSTANCES = 16

#: The setting that caps them.
MAX_CLIENT_INSTANCES_SETTING = "pool.maxClientInstances"

#: When a caller refused for want of an idle instance is told to try again, in seconds.
_BUSY_RETRY = 1.0

#: How many instances a shared server known to ask may run, one per asking call.
DEFAULT_MAX_ASKING_INSTANCES = 32

#: The setting that caps them.
MAX_ASKING_INSTANCES_SETTING = "pool.maxAskingInstances"

#: How long a request given up on still counts as running at its server, in seconds.
DEFAULT_CANCEL_GRACE = 30.0

#: The setting that says so.
CANCEL_GRACE_SETTING = "pool.cancelGrace"

#: The scope keys of a shared server's instances of their own for asking calls.
ASKING_PREFIX = "ask-"


@define(eq=False)
class _ProgressWatch:
    """A C{tools/call} in flight under a progress token of the pool's."""

    #: Who hears its reports, if anyone.
    sink: ProgressSink | None
    #: The idle bound each report grants it again.
    bound: float
    #: Its deadline, once it was sent.
    deadline: Deadline | None = None


class _Outcome(Generic[T]):
    """
    The result of one piece of work that any number of callers may wait for, each on a
    Deferred of its own: cancelling one waiter does not cancel the work, nor the others.
    """

    __slots__ = ("_done", "_result", "_waiters")

    def __init__(self) -> None:
        self._done = False
        self._result: T | Failure | None = None
        self._waiters: list[Deferred[T]] = []

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, work: Deferred[T]) -> None:
        """Take the outcome of C{work}, which ends with it (its errors are consumed)."""
        work.addBoth(self.fire)

    def fire(self, result: T | Failure) -> None:
        self._done = True
        self._result = result
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            self._deliver(waiter)

    def _deliver(self, waiter: Deferred[T]) -> None:
        if waiter.called:  # its caller cancelled it
            return
        if isinstance(self._result, Failure):
            waiter.errback(self._result)
        else:
            waiter.callback(self._result)  # type: ignore[arg-type]

    def wait(self) -> Deferred[T]:
        waiter: Deferred[T] = Deferred()
        if self._done:
            self._deliver(waiter)
        else:
            self._waiters.append(waiter)
        return waiter


@define(eq=False)
class _Slot:
    """
    Everything about one key that outlives its instances: the current instance, and
    the crashes in a row that decide when the next may start.
    """

    key: Key
    config: Server
    instance: _Instance | None = None
    failures: int = 0
    crashed_last: bool = False
    last_error: str | None = None
    retry_at: float | None = None
    #: Calls that chose this slot and wait for its instance to be ready.
    claims: int = 0
    #: How many holders want each resource URI's updates (see L{Pool.subscribe}).
    interests: dict[str, int] = field(factory=dict)
    #: The start scheduled to replace an instance while interests are held.
    revival: IDelayedCall | None = None

    def failure_reason(self) -> str:
        reason = self.last_error or "it failed"
        if self.failures > 1:
            what = "crashed" if self.crashed_last else "failed to start"
            reason += f"; it {what} {self.failures} times in a row"
        return reason


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
    _on_end: list[Callable[[], None]] = field(factory=list)

    def on_end(self, withdraw: Callable[[], None]) -> None:
        """Have C{withdraw} called when the request ends."""
        self._on_end.append(withdraw)

    def ended(self) -> None:
        withdrawals, self._on_end = self._on_end, []
        for withdraw in withdrawals:
            withdraw()


@define(eq=False)
class _Instance:
    """One started (or starting) upstream server."""

    slot: _Slot
    session: UpstreamSession | None = None
    connecting: Deferred[Any] | None = None
    ready: _Outcome[None] = field(factory=_Outcome)
    closed: _Outcome[None] | None = None
    #: Why it can no longer be used, once it cannot; set once.
    ended: str | None = None
    #: Whether it ended on its own (crash, failed start) rather than being closed.
    failed: bool = False
    in_flight: int = 0
    #: Whom each request in flight is for (one entry per request, C{None} for nobody's):
    #: kept in the same step as L{in_flight}, so the two can never disagree.
    callers: list[object] = field(factory=list)
    #: The deadlines of the requests in flight, paused while a question is pending.
    deadlines: set[Deadline] = field(factory=set)
    #: The request made for nobody that its server asked while it was alone in flight,
    #: until it ends (see L{Pool.lone_request}).
    lone: NobodysRequest | None = None
    #: The URIs subscribed (or being subscribed) upstream on this instance, each with
    #: the outcome of its C{resources/subscribe}.
    subscriptions: dict[str, _Outcome[None]] = field(factory=dict)
    #: Whether a new instance waits for this one, closing, to be gone (see L{Pool._room}).
    claimed: bool = False
    last_used: float = 0.0
    #: When its session was ready, for telling a stable instance from a crash loop.
    up_since: float | None = None
    idle_timer: IDelayedCall | None = None
    catalogue: dict[str, list[dict[str, Any]]] = field(factory=dict)
    listings: dict[str, _Outcome[list[dict[str, Any]]]] = field(factory=dict)
    #: Bumped by each list_changed, so a listing that raced one is not cached.
    versions: dict[str, int] = field(factory=dict)

    @property
    def name(self) -> str:
        return self.slot.key[0]

    @property
    def scope(self) -> str:
        return self.slot.key[1]

    @property
    def usable(self) -> bool:
        return self.session is not None and self.ended is None


def transport_error(server: str, what: str, error: ConnectionError) -> UpstreamBroke:
    """
    What a caller is told when the transport to C{server} failed C{what}: a refusal
    by status (503 when the server said it is busy or unavailable), or a request that
    broke, saying whether the server may have started it.
    """
    if isinstance(error, TransportRefused):
        busy = error.status in (429, 503)
        return UpstreamBroke(
            server,
            what,
            f"it refused the request: {error}",
            status=503 if busy else 502,
            retry_in=error.retry_after,
        )
    started = bool(getattr(error, "started", True))
    return UpstreamBroke(
        server, what, str(error), status=502 if started else 503, outcome_unknown=started
    )


#: What is left of a call's bound after its server's start took the rest (seconds).
_LEAST_BOUND: Final = 0.001


def _at_least_a_call(seconds: float) -> float:
    """C{pool.callMaxDuration}, checked: a positive number of seconds."""
    if seconds <= 0:
        raise ValueError(f"call_max_duration must be positive, not {seconds!r}")
    return seconds


def asked_to_wait(error: BaseException | None) -> float | None:
    """The C{Retry-After} of the HTTP refusal behind C{error}, if there is one."""
    seen = error
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, TransportRefused):
            return seen.retry_after
        seen = seen.__cause__
    return None


class Pool(MultiService):
    """
    Upstream servers, started on first use, kept warm, reaped when idle, replaced when
    they die.  A Twisted service: stopping it closes every instance and waits until
    every child process has been reaped.
    """

    log = Logger()

    def __init__(
        self,
        *,
        servers: ServersConfig,
        connector: Connects,
        clock: IReactorTime,
        call_timeout: float,
        idle_timeout: float,
        publish: Publish = _no_events,
        handlers: HandlersFor | None = None,
        backoff: Backoff | None = None,
        max_client_instances: int = DEFAULT_MAX_CLIENT_INSTANCES,
        masker: SecretMasker | None = None,
        stable_after: float = 10.0,
        max_asking_instances: int = DEFAULT_MAX_ASKING_INSTANCES,
        cancel_grace: float = DEFAULT_CANCEL_GRACE,
        call_max_duration: float = 3600.0,
    ) -> None:
        """
        @param connector: opens sessions (L{mcpx.upstream.connect.make_connector}).
        @param call_timeout: C{pool.callTimeout}: the longest one upstream request may take.
        @param idle_timeout: C{pool.idleTimeout}: how long an unused instance is kept.
        @param publish: C{publish(kind, server, **data)} for each event.
        @param handlers: the L{UpstreamHandlers} for an instance, from (server, scope key).
        @param backoff: the restart delays after crashes in a row.
        @param max_client_instances: C{pool.maxClientInstances}: the most instances one
            C{client}-scoped server runs at once.
        @param masker: hides the configured credentials in what upstreams say (their
            errors, why they failed); taught each configuration L{reload} takes.
        @param stable_after: C{pool.stableAfter}: how long an instance must have been
            up for its predecessors' crashes to be forgotten.
        @param max_asking_instances: C{pool.maxAskingInstances}: the most instances a
            shared server known to ask runs, so that each asking call has its own.
        @param cancel_grace: C{pool.cancelGrace}: how long a request given up on still
            counts as running at its server, unless it answers first.
        @param call_max_duration: C{pool.callMaxDuration}: how long a C{tools/call}
            that keeps reporting progress may run in all.
        """
        MultiService.__init__(self)
        #: Told of each tool call that reached a configured server, when it ends:
        #: C{(server, tool, seconds, outcome)}, outcome C{ok}, C{tool_error} or C{error}.
        self.on_call: Callable[[str, str, float, str], None] | None = None
        effective_call_timeout(call_timeout, None)  # refuses a bound that is no bound
        if idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive, not {idle_timeout!r}")
        if max_client_instances < 1:
            raise ValueError(
                f"max_client_instances must be at least 1, not {max_client_instances!r}"
            )
        self._servers = servers
        self._connector = connector
        self._clock = clock
        self._call_timeout = call_timeout
        self._idle_timeout = idle_timeout
        self._publish_to = publish
        self._handlers = handlers
        self._backoff = backoff or Backoff()
        self._max_client_instances = max_client_instances
        if max_asking_instances < 1:
            raise ValueError(
                f"max_asking_instances must be at least 1, not {max_asking_instances!r}"
            )
        if cancel_grace < 0:
            raise ValueError(f"cancel_grace must not be negative, not {cancel_grace!r}")
        self._max_asking_instances = max_asking_instances
        self._cancel_grace = cancel_grace
        #: The shared servers known to ask questions on their connections.
        self._asking: set[str] = set()
        #: The asking servers whose cap made calls share an instance since one was free.
        self._asking_full: set[str] = set()
        #: Instances closed on purpose whose process may still run, by server.
        self._closing: dict[str, set[_Instance]] = {}
        #: The client-scoped servers whose cap refused a caller since one was last idle.
        self._saturated: set[str] = set()
        self._masker = masker if masker is not None else SecretMasker(servers)
        self._stable_after = stable_after
        self._call_max_duration = _at_least_a_call(call_max_duration)
        self._slots: dict[str, dict[str, _Slot]] = {}
        self._pending: set[_Outcome[None]] = set()
        self._progress: dict[str, _ProgressWatch] = {}
        self._tokens = itertools.count(1)
        # Named apart from another daemon's (questions outlive a restart).
        self._request_prefix = f"request-{secrets.token_hex(4)}-"
        self._request_numbers = itertools.count(1)
        self._stopping = False

    # Keys and slots

    @property
    def servers(self) -> ServersConfig:
        return self._servers

    def scope_key(self, server: str, client: str) -> str:
        """
        The scope key a call from C{client} uses: the client's identity for a
        C{client}-scoped server, C{""} for a shared one.

        @raise UnknownServer: if C{server} is not configured.
        """
        config = self._servers.servers.get(server)
        if config is None:
            raise UnknownServer(server, self._servers)
        return client if config.scope is Scope.CLIENT else ""

    def _slot(self, server: str, client: str) -> _Slot:
        config = self._servers.servers.get(server)
        if config is None:
            raise UnknownServer(server, self._servers)
        scope = client if config.scope is Scope.CLIENT else ""
        by_scope = self._slots.get(server)
        if by_scope is None:
            by_scope = self._slots[server] = {}
        slot = by_scope.get(scope)
        if slot is None:
            slot = by_scope[scope] = _Slot((server, scope), config)
        return slot

    def _forget_slot(self, slot: _Slot) -> None:
        """Drop a slot with nothing worth keeping, so callers that come and go cost nothing."""
        if slot.instance is not None or slot.failures or slot.interests:
            return
        name, scope = slot.key
        by_scope = self._slots.get(name)
        if by_scope is not None and by_scope.get(scope) is slot:
            del by_scope[scope]
            if not by_scope:
                del self._slots[name]

    def in_flight(self, server: str, scope_key: str) -> int:
        """Upstream requests in flight on one instance, whoever made them."""
        slot = self._slots.get(server, {}).get(scope_key)
        if slot is None or slot.instance is None:
            return 0
        return slot.instance.in_flight

    def owner(self, server: str, scope_key: str) -> object | None:
        """
        The one caller every request in flight on (C{server}, C{scope_key}) is for, or
        C{None} when there is none or several, or a request that is nobody's (which
        includes a request mcpx gave up on that its server has not answered yet, for
        up to C{pool.cancelGrace}): a question arriving on that connection belongs to
        that call, and to no other.

        Asked when a question arrives: one that finds several calls in flight teaches
        the pool that the server asks (a C{shared} one then gives each call an
        instance of its own, see L{call_tool}).
        """
        slot = self._slots.get(server, {}).get(scope_key)
        instance = slot.instance if slot is not None else None
        if instance is None:
            return None
        late = self._late(instance)
        callers = instance.callers
        if not callers or late:
            if len(callers) + late > 1:
                self._learn_asking(instance)
            return None
        first = callers[0]
        for other in callers:
            if other is not first:
                self._learn_asking(instance)
                return None
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
        slot = self._slots.get(server, {}).get(scope_key)
        instance = slot.instance if slot is not None else None
        if instance is None:
            return None
        callers, deadlines = instance.callers, instance.deadlines
        # A request is counted (its caller listed) a moment before its deadline is set:
        # one asking in between is left unattributed rather than guessed.
        if len(callers) != 1 or callers[0] is not None or len(deadlines) != 1:
            return None
        if self._late(instance):
            return None
        [deadline] = deadlines
        lone = instance.lone
        if lone is None or lone.deadline is not deadline:
            lone = instance.lone = NobodysRequest(
                f"{self._request_prefix}{next(self._request_numbers)}", deadline
            )
        return lone

    def callers(self, server: str, scope_key: str) -> list[object]:
        """Whom the requests in flight on (C{server}, C{scope_key}) are for, in order."""
        slot = self._slots.get(server, {}).get(scope_key)
        instance = slot.instance if slot is not None else None
        return list(instance.callers) if instance is not None else []

    def notify(self, server: str, client: str, method: str) -> int:
        """
        Send C{method} (a notification without params) to the running instances that
        serve C{client}: every instance of a C{shared} server, the client's own of a
        C{client}-scoped one; none is started for it.

        @return: how many instances it was sent to.
        """
        config = self._servers.servers.get(server)
        if config is None:
            return 0
        slots = self._slots.get(server, {})
        if config.scope is Scope.CLIENT:
            chosen = [slots[client]] if client in slots else []
        else:
            chosen = list(slots.values())
        sent = 0
        for slot in chosen:
            instance = slot.instance
            if instance is None or not instance.usable:
                continue
            assert instance.session is not None
            try:
                instance.session.rpc.notify(method)
            except Exception:
                self.log.failure(
                    "sending {method} to {server} failed", method=method, server=server
                )
                continue
            sent += 1
        return sent

    def _late(self, instance: _Instance) -> int:
        """Requests given up on that the instance's server may still be working on."""
        session = instance.session
        return session.rpc.awaiting_late if session is not None else 0

    def _learn_asking(self, instance: _Instance) -> None:
        name = instance.name
        if name in self._asking or instance.slot.config.scope is not Scope.SHARED:
            return
        self._asking.add(name)
        self.log.info(
            "upstream {server} asked a question while several calls were in flight; from "
            "now on each call gets an instance of its own, up to {limit} "
            "({setting}), so its questions reach the right client",
            server=name,
            limit=self._max_asking_instances,
            setting=MAX_ASKING_INSTANCES_SETTING,
        )

    def asks(self, server: str) -> bool:
        """Whether C{server} is known to ask questions on its connection (see L{owner})."""
        return server in self._asking

    def _slot_for(self, server: str, client: str, caller: object) -> _Slot:
        """
        The slot a call for C{caller} runs on: the server's own, unless it is a shared
        server known to ask, when a call made for a caller gets an instance nobody else
        is using (an idle one first, else a new one under C{pool.maxAskingInstances}).
        """
        slot = self._slot(server, client)
        if caller is None or server not in self._asking or slot.config.scope is not Scope.SHARED:
            return slot
        by_scope = self._slots[server]
        now = self._clock.seconds()
        asking = [s for key, s in by_scope.items() if key.startswith(ASKING_PREFIX)]
        # The server's own slot last: it also serves the catalogue and callers' strangers.
        for candidate in (*asking, slot):
            if candidate.retry_at is not None and candidate.retry_at > now:
                # Backing off after a crash: no new instance is spawned around it.
                return slot
        for candidate in (*asking, slot):
            if self._free(candidate):
                return candidate
        if len(asking) + 1 >= self._max_asking_instances:
            if server not in self._asking_full:
                self._asking_full.add(server)
                self.log.warn(
                    "upstream {server}: all {limit} instances are busy with asking calls "
                    "({setting}); calls share instances again, and a question they ask "
                    "may wait in the broker (mcpx elicit)",
                    server=server,
                    limit=self._max_asking_instances,
                    setting=MAX_ASKING_INSTANCES_SETTING,
                )
            return slot
        self._asking_full.discard(server)
        number = next(n for n in itertools.count(1) if f"{ASKING_PREFIX}{n}" not in by_scope)
        key = f"{ASKING_PREFIX}{number}"
        fresh = by_scope[key] = _Slot((server, key), slot.config)
        return fresh

    def _free(self, slot: _Slot) -> bool:
        """Whether no call is on the slot, nor waiting for it, nor given up on there."""
        if slot.claims:
            return False
        instance = slot.instance
        if instance is None:
            return True
        return instance.ended is None and not instance.in_flight and not self._late(instance)

    async def _claim(self, slot: _Slot, within: float | None = None) -> _Instance:
        """L{_ready}, with the slot counted as taken while its instance starts."""
        slot.claims += 1
        try:
            return await self._ready(slot, within)
        finally:
            slot.claims -= 1

    def hold_deadlines(self, server: str, scope_key: str) -> Callable[[], None]:
        """
        Stop the C{pool.callTimeout} clocks of the requests in flight on (C{server},
        C{scope_key}) while a question is pending; the returned function starts them
        again (call it once).
        """
        slot = self._slots.get(server, {}).get(scope_key)
        instance = slot.instance if slot is not None else None
        held = list(instance.deadlines) if instance is not None else []
        for deadline in held:
            deadline.pause()

        def release() -> None:
            for deadline in held:
                deadline.resume()

        return release

    # Events

    def _publish(self, kind: str, server: str | None, **data: Any) -> None:
        try:
            self._publish_to(kind, server, **data)
        except Exception:
            self.log.failure("publishing a {kind} event failed", kind=kind)

    # Starting

    def _start(self, slot: _Slot) -> _Instance:
        """
        Start an instance for C{slot}; one that replaces another under
        C{pool.maxClientInstances} is spawned once the other's process is gone.

        @raise ServerUnavailable: if it may not start now.
        @raise TooManyInstances: if it would be one instance too many.
        """
        name, scope = slot.key
        if self._stopping:
            raise ServerUnavailable(name, _STOPPING)
        if slot.retry_at is not None:
            wait = slot.retry_at - self._clock.seconds()
            if wait > 0:
                raise ServerUnavailable(name, slot.failure_reason(), wait)
        after = self._room(slot)
        instance = _Instance(slot)
        slot.instance = instance
        self._publish("server.starting", name, instance=scope)
        try:
            connecting: Deferred[UpstreamSession]
            if after is None:
                connecting = ensureDeferred(
                    self._connector.connect(name, slot.config, self._handlers_for(instance))
                )
            else:
                connecting = Deferred.fromCoroutine(self._connect_after(after, instance))
        except Exception:
            # A connector that fails before it is even awaited fails the start all the same.
            connecting = fail()
        connecting.addCallbacks(
            self._started,
            self._start_failed,
            callbackArgs=(instance,),
            errbackArgs=(instance,),
        )
        instance.connecting = connecting
        instance.ready = self._track(connecting, f"starting upstream {name!r}")
        return instance

    async def _connect_after(self, after: Deferred[None], instance: _Instance) -> UpstreamSession:
        try:
            await after
        except CancelledError:
            raise
        except Exception:
            pass  # logged where it was closed; its process is gone all the same
        name = instance.name
        return await self._connector.connect(
            name, instance.slot.config, self._handlers_for(instance)
        )

    def _room(self, slot: _Slot) -> Deferred[None] | None:
        """
        Make room for a new instance of C{slot} under C{pool.maxClientInstances}: C{None}
        when there is room, else a Deferred that fires once the instance it replaces (an
        idle one stopped now, the least recently used, or one already closing) is gone.

        @raise TooManyInstances: when every instance is busy.
        """
        if slot.config.scope is not Scope.CLIENT:
            return None
        name = slot.key[0]
        limit = self._max_client_instances
        running = [s.instance for s in self._slots.get(name, {}).values() if s.instance]
        closing = [i for i in self._closing.get(name, ()) if not i.claimed]
        if len(running) + len(closing) < limit:
            return None
        if closing:
            victim = closing[0]
        else:
            idle = [i for i in running if i.usable and not i.in_flight and not i.slot.interests]
            if not idle:
                if name not in self._saturated:
                    self._saturated.add(name)
                    self.log.warn(
                        "upstream {server}: all {limit} instances are busy, refusing new "
                        "callers until one is idle ({setting})",
                        server=name,
                        limit=limit,
                        setting=MAX_CLIENT_INSTANCES_SETTING,
                    )
                raise TooManyInstances(name, limit, MAX_CLIENT_INSTANCES_SETTING, _BUSY_RETRY)
            victim = min(idle, key=lambda i: i.last_used)
            self.log.info(
                "stopping upstream {server} for {scope}: {limit} instances run, the least "
                "recently used makes room for a new caller",
                server=name,
                scope=victim.scope,
                limit=limit,
            )
            gone = self._close(
                victim,
                f"stopped to make room for a new caller ({limit} instances at most, "
                f"{MAX_CLIENT_INSTANCES_SETTING})",
                "server.reaped",
            )
            gone.addErrback(lambda _: None)  # the close logs its own failure
            self._forget_slot(victim.slot)
        self._saturated.discard(name)
        victim.claimed = True
        return self._close(victim, victim.ended or "", None)

    def _started(self, session: UpstreamSession, instance: _Instance) -> None:
        instance.session = session
        name, scope = instance.slot.key
        if instance.ended is not None:
            # Closed while starting, too late for the start to be cancelled.
            self._close_session(instance)
            return
        instance.last_used = instance.up_since = self._clock.seconds()
        declaration = session.declaration
        self.log.info(
            "upstream {server} started ({era}, {revision})",
            server=name,
            era=session.era.value,
            revision=declaration.revision.value if declaration is not None else None,
        )
        self._publish(
            "server.started",
            name,
            instance=scope,
            era=session.era.value,
            revision=declaration.revision.value if declaration is not None else None,
        )
        session.channel.when_lost().addErrback(self._lost, instance)
        if session.channel.cancels_with_notification:
            # It hears a cancel and may answer (or ask) for the request all the same.
            session.rpc.expect_late(self._cancel_grace)
        if instance.ended is None:
            self._schedule_idle(instance, self._idle_timeout)
            for uri in tuple(instance.slot.interests):
                self._subscribed(instance, uri).wait().addErrback(
                    self._resubscribe_failed, instance, uri
                )

    def _start_failed(self, failure: Failure, instance: _Instance) -> None:
        name, scope = instance.slot.key
        if instance.ended is not None:
            if not failure.check(CancelledError):
                self.log.info(
                    "upstream {server} failed while being closed: {why}",
                    server=name,
                    why=failure.getErrorMessage(),
                )
            return
        why = self._masker.mask(failure.getErrorMessage() or repr(failure.value))
        self.log.warn("upstream {server} could not be started: {why}", server=name, why=why)
        retry_in = self._failed(
            instance, f"could not start: {why}", crashed=False, asked=asked_to_wait(failure.value)
        )
        self._publish("server.failed", name, instance=scope, error=why, retry_in=retry_in)
        self._revive_later(instance.slot, retry_in)

    def _failed(
        self, instance: _Instance, why: str, *, crashed: bool, asked: float | None = None
    ) -> float:
        """
        Count a crash or failed start; returns the delay before the next start.

        @param asked: the seconds the server asked to wait (C{Retry-After}), which
            replace the back-off delay.
        """
        slot = instance.slot
        instance.ended = why
        instance.failed = True
        self._cancel_idle(instance)
        if slot.instance is instance:
            slot.instance = None
        self._forgive(instance)
        slot.failures += 1
        slot.crashed_last = crashed
        slot.last_error = why
        delay = self._backoff.delay(slot.failures) if asked is None else asked
        slot.retry_at = self._clock.seconds() + delay
        return delay

    def _handlers_for(self, instance: _Instance) -> UpstreamHandlers:
        """The injected handlers, with the pool listening to every notification first."""
        base = self._handlers(*instance.slot.key) if self._handlers is not None else NO_HANDLERS
        also = base.notification

        def heard(method: str, params: Mapping[str, Any] | None) -> None:
            self._heard(instance, method, params)
            if also is not None:
                also(method, params)

        return evolve(base, notification=heard)

    async def _ready(self, slot: _Slot, within: float | None = None) -> _Instance:
        """
        The slot's instance, started if need be.

        @param within: the longest to wait for a start (a call's own bound); the start
            goes on after the wait is given up.
        """
        instance = slot.instance
        if instance is not None and instance.usable:
            return instance
        if instance is None:
            instance = self._start(slot)
        if not instance.ready.done:
            waiting = instance.ready.wait()
            if within is not None:
                waiting.addTimeout(within, self._clock)
            try:
                await waiting
            except DeferredTimeout:
                raise ServerUnavailable(
                    instance.name,
                    f"it is still starting after {format_seconds(within or 0)}, longer than "
                    "the call may take; the start goes on, so a later call may find it ready",
                ) from None
        if not instance.usable:
            raise self._unavailable(instance)
        return instance

    def _unavailable(self, instance: _Instance, prefix: str = "") -> ServerUnavailable:
        slot = instance.slot
        if instance.failed:
            retry_in = None
            if slot.retry_at is not None:
                retry_in = max(0.0, slot.retry_at - self._clock.seconds())
            return ServerUnavailable(instance.name, prefix + slot.failure_reason(), retry_in)
        return ServerUnavailable(instance.name, prefix + (instance.ended or "it is not running"))

    # Losing an instance

    def _lost(self, failure: Failure, instance: _Instance) -> None:
        if instance.ended is None:
            self._crashed(instance, failure.getErrorMessage())

    def _crashed(self, instance: _Instance, why: str) -> None:
        name, scope = instance.slot.key
        why = self._masker.mask(why)
        retry_in = self._failed(instance, why, crashed=True)
        self.log.warn(
            "upstream {server} ended unexpectedly: {why}; next start in {delay}",
            server=name,
            why=why,
            delay=format_seconds(retry_in),
        )
        self._publish(
            "server.exited",
            name,
            instance=scope,
            reason=why,
            crashes=instance.slot.failures,
            retry_in=retry_in,
        )
        wanted = instance.slot.interests
        if wanted:
            self._publish(
                "warning",
                name,
                message=f"server {name!r} ended while {', '.join(sorted(wanted))} "
                f"{'is' if len(wanted) == 1 else 'are'} watched; it is started again in "
                f"{format_seconds(retry_in)} and subscribed again",
            )
            self._revive_later(instance.slot, retry_in)
        self._close_session(instance)

    def _close_session(self, instance: _Instance) -> _Outcome[None]:
        """Close the session (releasing the process) once; the outcome fires when it is reaped."""
        if instance.closed is None:
            assert instance.session is not None
            instance.closed = self._track(
                instance.session.close(), f"closing upstream {instance.name!r}"
            )
        return instance.closed

    def _cut_short(self, instance: _Instance, error: BaseException) -> ServerUnavailable:
        """The error for a request whose connection went away under it."""
        if instance.ended is None:
            cause = error.reason if isinstance(error, ConnectionClosed) else error
            self._crashed(instance, str(cause))
        return self._unavailable(instance, "the call was cut short: ")

    # Closing on purpose

    def _close(self, instance: _Instance, why: str, event: str | None) -> Deferred[None]:
        """
        Close an instance on purpose; fires once its process is gone.

        @param event: the event to publish once it is, or C{None}.
        """
        if instance.ended is not None:
            if instance.closed is not None:
                return instance.closed.wait()
            return instance.ready.wait()
        instance.ended = why
        self._cancel_idle(instance)
        slot = instance.slot
        if slot.instance is instance:
            slot.instance = None
        name, scope = slot.key
        if instance.session is None:
            # Still starting: cancelling the start closes what it had opened.
            assert instance.connecting is not None
            instance.connecting.cancel()
            done = instance.ready.wait()
        else:
            done = self._close_session(instance).wait()
        # Its process may run a while yet, and counts against pool.maxClientInstances.
        closing = self._closing.setdefault(name, set())
        closing.add(instance)

        def gone(result: object) -> object:
            closing.discard(instance)
            if not closing and self._closing.get(name) is closing:
                del self._closing[name]
            return result

        done.addBoth(gone)
        if event is not None:
            done.addCallback(lambda _: self._publish(event, name, instance=scope, reason=why))
        return done

    def _cancel_idle(self, instance: _Instance) -> None:
        if instance.idle_timer is not None:
            if instance.idle_timer.active():
                instance.idle_timer.cancel()
            instance.idle_timer = None

    def _schedule_idle(self, instance: _Instance, delay: float) -> None:
        instance.idle_timer = self._clock.callLater(delay, self._idle_check, instance)

    def _idle_check(self, instance: _Instance) -> None:
        instance.idle_timer = None
        if instance.ended is not None or instance.in_flight or instance.slot.interests:
            # Rescheduled by whatever ends the activity.
            return
        idle = self._clock.seconds() - instance.last_used
        if idle < self._idle_timeout:
            self._schedule_idle(instance, self._idle_timeout - idle)
            return
        self.log.info(
            "stopping upstream {server}: unused for {idle}",
            server=instance.name,
            idle=format_seconds(idle),
        )
        self._close(instance, f"unused for {format_seconds(idle)}", "server.reaped")
        self._forget_slot(instance.slot)

    def _track(self, work: Deferred[Any], what: str) -> _Outcome[None]:
        """Keep C{work} until it ends, so stopping waits for it; its failure is logged."""
        outcome: _Outcome[None] = _Outcome()

        def ended(result: object) -> None:
            self._pending.discard(outcome)
            if isinstance(result, Failure) and not result.check(CancelledError):
                self.log.failure("{what} failed", result, what=what)

        self._pending.add(outcome)
        work.addBoth(ended)
        outcome.feed(work)
        return outcome

    # Notifications

    def _heard(self, instance: _Instance, method: str, params: Mapping[str, Any] | None) -> None:
        stale = _STALE_AFTER.get(method)
        if stale is not None:
            for kind in stale:
                instance.catalogue.pop(kind, None)
                instance.versions[kind] = instance.versions.get(kind, 0) + 1
            return
        given: Mapping[str, Any] = params if params is not None else {}
        if method == "notifications/message":
            self._publish(
                "server.log",
                instance.name,
                level=given.get("level"),
                logger=given.get("logger"),
                data=given.get("data"),
            )
        elif method == "notifications/resources/updated":
            uri = given.get("uri")
            if isinstance(uri, str):
                self._publish("resource.updated", instance.name, uri=uri)
        elif method == "notifications/progress":
            token = given.get("progressToken")
            self._publish(
                "progress",
                instance.name,
                progressToken=token,
                progress=given.get("progress"),
                total=given.get("total"),
                message=given.get("message"),
            )
            watch = self._progress.get(token) if isinstance(token, str) else None
            if watch is None:
                return
            if watch.deadline is not None:
                watch.deadline.extend(watch.bound)
            if watch.sink is not None:
                try:
                    watch.sink(dict(given))
                except Exception:
                    self.log.failure("a progress callback failed")

    # Requests

    async def _run(
        self,
        instance: _Instance,
        what: str,
        timeout: float,
        action: Callable[[UpstreamSession], Coroutine[Any, Any, T]],
        caller: object = None,
        *,
        asked: float | None = None,
        progress: _ProgressWatch | None = None,
    ) -> T:
        """
        One upstream request on a ready instance: counted in flight (with whom it is
        for), bounded by C{timeout}, and turned into a clear error if the instance dies
        under it.

        @param asked: when the caller asked, if waiting for the start came first: that
            wait counted against C{timeout}.
        @param progress: the call's progress token, whose reports extend its deadline.
        """
        session = instance.session
        assert session is not None
        instance.in_flight += 1
        instance.callers.append(caller)
        try:
            work = Deferred.fromCoroutine(action(session))
            left = timeout
            if asked is not None:
                left = max(timeout - (self._clock.seconds() - asked), _LEAST_BOUND)
            if progress is None:
                deadline = Deadline(self._clock, left, work.cancel)
            else:
                deadline = Deadline(
                    self._clock, left, work.cancel, ceiling=max(self._call_max_duration, left)
                )
                progress.deadline = deadline
            instance.deadlines.add(deadline)
            try:
                result = await work
            except CancelledError:
                if deadline.expired:
                    extended_to = deadline.running() if deadline.extended else None
                    raise CallTimedOut(
                        instance.name, what, timeout, extended_to=extended_to
                    ) from None
                raise
            except (ConnectionClosed, ChannelClosed) as e:
                raise self._cut_short(instance, e) from None
            except RpcError as e:
                if self._masker:
                    raise masked_rpc_error(e, self._masker) from None
                raise
            except MessageTooLarge as e:
                raise AnswerTooLarge(instance.name, what, e.limit) from None
            except ConnectionError as e:
                # A remote server's transport failed this one request (each HTTP request
                # stands alone, so the instance lives on, and its status says what broke).
                broke = transport_error(instance.name, what, e)
                instance.slot.last_error = broke.message
                raise broke from None
            finally:
                deadline.cancel()
                instance.deadlines.discard(deadline)
                if instance.lone is not None and instance.lone.deadline is deadline:
                    self._lone_ended(instance)
        finally:
            instance.callers.remove(caller)
            self._finished(instance)
            if caller is not None:
                # The questions it asked that still wait are withdrawn with it
                # (mcpx.questions.caller.Caller.call_ended).
                ended = getattr(caller, "call_ended", None)
                if ended is not None:
                    ended()
        self._forgive(instance)
        return result

    def _lone_ended(self, instance: _Instance) -> None:
        """
        The request made for nobody whose questions are its own ended (answered, failed,
        given up on): what it asked that still waits is withdrawn, as a caller's is
        (L{mcpx.questions.caller.Caller.call_ended}).
        """
        lone = instance.lone
        assert lone is not None
        instance.lone = None
        lone.ended()

    def _forgive(self, instance: _Instance) -> None:
        """
        Forget the crashes before C{instance} once it has stayed up C{stable_after}:
        answering one call proves nothing of a server that dies half a second after
        each start, and the delay must keep growing for it.
        """
        up_since = instance.up_since
        if up_since is not None and self._clock.seconds() - up_since >= self._stable_after:
            instance.slot.failures = 0

    def _finished(self, instance: _Instance) -> None:
        instance.in_flight -= 1
        if instance.in_flight == 0:
            instance.last_used = self._clock.seconds()
            self._idle_again(instance)

    def _idle_again(self, instance: _Instance) -> None:
        if (
            instance.idle_timer is None
            and instance.ended is None
            and not instance.in_flight
            and not instance.slot.interests
        ):
            self._schedule_idle(instance, self._idle_timeout)

    async def session(self, server: str, client: str = "") -> UpstreamSession:
        """
        The session of the instance serving C{client}, started if need be.

        Requests sent on it directly are not counted in flight and do not keep the
        instance from being reaped; use L{request} where that matters.

        @raise UnknownServer: if C{server} is not configured.
        @raise ServerUnavailable: if it cannot be started now.
        """
        instance = await self._ready(self._slot(server, client))
        instance.last_used = self._clock.seconds()
        assert instance.session is not None
        return instance.session

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        client: str = "",
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
        on_progress: ProgressSink | None = None,
        caller: object = None,
    ) -> dict[str, Any]:
        """
        Call a tool.

        @param timeout: a bound shorter than C{pool.callTimeout} for this call; a longer
            one is clamped to it.
        @param on_progress: called with the params of each C{notifications/progress}
            the server sends about this call.  Every call carries a progress token of
            the pool's own (C{mcpx-<n>}), and each report about it gives the call its
            bound again, up to C{pool.callMaxDuration} in all (L{mcpx.pool.budget}).
        @param caller: the call it is made for (L{mcpx.questions.caller.Caller}): its
            questions may be put to that call's client, see L{owner}.
        @return: the C{CallToolResult}.
        @raise UnknownServer: if C{server} is not configured.
        @raise ServerUnavailable: if it cannot be started, or died during the call.
        @raise CallTimedOut: if it did not answer in time.
        @raise mcpx.wire.errors.RpcError: as the server answered.
        """
        bound = effective_call_timeout(self._call_timeout, timeout)
        asked = self._clock.seconds()
        # An unknown server is refused before anything is counted for it.
        slot = self._slot_for(server, client, caller)
        outcome = "error"
        try:
            instance = await self._claim(slot, bound)
            token = f"mcpx-{next(self._tokens)}"
            meta = {**meta, "progressToken": token} if meta else {"progressToken": token}
            watch = self._progress[token] = _ProgressWatch(on_progress, bound)
            try:
                result = await self._run(
                    instance,
                    tool,
                    bound,
                    lambda session: session.call_tool(tool, arguments, meta=meta, caller=caller),
                    caller,
                    asked=asked,
                    progress=watch,
                )
            finally:
                del self._progress[token]
            outcome = "tool_error" if result.get("isError") else "ok"
            return result
        finally:
            if self.on_call is not None:
                self.on_call(server, tool, self._clock.seconds() - asked, outcome)

    async def request(
        self,
        server: str,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        client: str = "",
        timeout: float | None = None,
        caller: object = None,
    ) -> dict[str, Any]:
        """
        Send any request (questions the server asks on the way are answered through the
        handlers, knowing C{caller}, as for L{call_tool}).  C{resources/subscribe} and
        C{resources/unsubscribe} go through L{subscribe} and L{unsubscribe}, so the pool
        knows what is open.

        @raise UnknownServer: if C{server} is not configured.
        @raise ServerUnavailable: if it cannot be started, or died during the request.
        @raise CallTimedOut: if it did not answer in time.
        """
        if method in (_SUBSCRIBE, _UNSUBSCRIBE):
            uri = (params or {}).get("uri")
            if not isinstance(uri, str):
                raise ValueError(f"{method} needs a uri")
            if method == _SUBSCRIBE:
                await self.subscribe(server, uri, client=client, timeout=timeout)
            else:
                await self.unsubscribe(server, uri, client=client, timeout=timeout)
            return {}
        bound = effective_call_timeout(self._call_timeout, timeout)
        asked = self._clock.seconds()
        instance = await self._claim(self._slot_for(server, client, caller), bound)
        return await self._run(
            instance,
            method,
            bound,
            lambda session: session.call(method, params, caller=caller),
            caller,
            asked=asked,
        )

    async def subscribe(
        self, server: str, uri: str, *, client: str = "", timeout: float | None = None
    ) -> None:
        """
        Hold one interest in a resource's updates: the first interest of a key in a URI
        subscribes upstream, later ones only count.  The instance is not reaped while
        any interest is held, and is replaced and subscribed again if it ends.  Each
        call that returns needs its own L{unsubscribe}; one that raises held nothing.

        @raise UnknownServer: if C{server} is not configured.
        @raise ServerUnavailable: if it cannot be started now.
        @raise mcpx.wire.errors.RpcError: if the server refused the subscription.
        """
        bound = effective_call_timeout(self._call_timeout, timeout)
        slot = self._slot(server, client)
        # Held before anything is awaited, so the instance cannot be reaped meanwhile and
        # an unsubscribe that races this one finds it counted.
        slot.interests[uri] = slot.interests.get(uri, 0) + 1
        try:
            instance = await self._ready(slot, bound)
            waiting = self._subscribed(instance, uri, bound).wait()
            waiting.addTimeout(bound, self._clock)
            try:
                await waiting
            except DeferredTimeout:
                raise CallTimedOut(server, _SUBSCRIBE, bound) from None
        except BaseException:
            # A restart or reload meanwhile carried this interest to the key's new slot.
            name, scope = slot.key
            self._release(self._slots.get(name, {}).get(scope, slot), uri)
            raise

    def _subscribed(
        self, instance: _Instance, uri: str, bound: float | None = None
    ) -> _Outcome[None]:
        """The upstream subscription of C{instance} to C{uri}, made once for every holder."""
        outcome = instance.subscriptions.get(uri)
        if outcome is not None:
            return outcome
        outcome = instance.subscriptions[uri] = _Outcome()

        def refused(failure: Failure) -> Failure:
            if instance.subscriptions.get(uri) is outcome:
                del instance.subscriptions[uri]
            return failure

        work = Deferred.fromCoroutine(
            self._run(
                instance,
                _SUBSCRIBE,
                bound if bound is not None else self._call_timeout,
                lambda session: session.subscribe(uri),
            )
        )
        work.addErrback(refused)
        outcome.feed(work)
        return outcome

    def _resubscribe_failed(self, failure: Failure, instance: _Instance, uri: str) -> None:
        if instance.ended is not None:
            return  # it ended again; its replacement subscribes afresh
        why = self._masker.mask(failure.getErrorMessage() or repr(failure.value))
        self.log.warn(
            "upstream {server}: subscribing again to {uri} failed: {why}",
            server=instance.name,
            uri=uri,
            why=why,
        )
        self._publish(
            "warning",
            instance.name,
            message=f"server {instance.name!r} was started again but refused the "
            f"subscription to {uri}: {why}; no updates will be delivered for it",
        )

    async def unsubscribe(
        self, server: str, uri: str, *, client: str = "", timeout: float | None = None
    ) -> None:
        """
        Release one interest held by L{subscribe}; the last one unsubscribes upstream,
        and an instance with none left may be reaped again.
        """
        bound = effective_call_timeout(self._call_timeout, timeout)
        config = self._servers.servers.get(server)
        if config is None:
            return  # removed by a reload, which dropped its interests
        slot = self._slots.get(server, {}).get(client if config.scope is Scope.CLIENT else "")
        if slot is None or uri not in slot.interests:
            return
        releasing = self._release(slot, uri)
        if releasing is not None:
            await self._run(*releasing, bound, lambda session: session.unsubscribe(uri))

    def _release(self, slot: _Slot, uri: str) -> tuple[_Instance, str] | None:
        """
        Count one interest in C{uri} released; when it was the last, the instance and
        method to unsubscribe it with (the caller sends it), if it was subscribed.
        """
        left = slot.interests.get(uri, 0) - 1
        if left > 0:
            slot.interests[uri] = left
            return None
        slot.interests.pop(uri, None)
        instance = slot.instance
        if not slot.interests:
            self._cancel_revival(slot)
        if instance is None:
            self._forget_slot(slot)
            return None
        self._idle_again(instance)
        subscribed = instance.subscriptions.pop(uri, None)
        if subscribed is None or not instance.usable:
            return None
        if not subscribed.done:
            # Still being subscribed: unsubscribe once that is through.
            def then(_: object) -> None:
                if uri not in instance.slot.interests and instance.usable:
                    gone = Deferred.fromCoroutine(
                        self._run(
                            instance,
                            _UNSUBSCRIBE,
                            self._call_timeout,
                            lambda session: session.unsubscribe(uri),
                        )
                    )
                    gone.addErrback(lambda f: None)

            subscribed.wait().addCallbacks(then, lambda _: None)
            return None
        return instance, _UNSUBSCRIBE

    def _revive_later(self, slot: _Slot, delay: float) -> None:
        """Start C{slot} again after C{delay}, for the interests held in it."""
        if self._stopping or not slot.interests:
            return
        self._cancel_revival(slot)
        slot.revival = self._clock.callLater(max(delay, 0.0), self._revive, slot)

    def _cancel_revival(self, slot: _Slot) -> None:
        if slot.revival is not None:
            if slot.revival.active():
                slot.revival.cancel()
            slot.revival = None

    def _revive(self, slot: _Slot) -> None:
        slot.revival = None
        if self._stopping or not slot.interests:
            return
        name, scope = slot.key
        by_scope = self._slots.get(name)
        if by_scope is None or by_scope.get(scope) is not slot:
            return  # restarted, reloaded or removed meanwhile: the new slot revives itself
        if slot.instance is not None:
            return  # someone else started it; its start subscribes
        self.log.info("starting upstream {server} again for its watched resources", server=name)
        try:
            self._start(slot)
        except (ServerUnavailable, TooManyInstances) as e:
            retry_in = getattr(e, "retry_in", None)
            self._revive_later(slot, retry_in if retry_in is not None else _BUSY_RETRY)

    def _carry_interests(self, slots: Mapping[str, _Slot], why: str) -> None:
        """
        After C{slots} were closed on purpose, make fresh slots for the ones whose
        interests are still held and start them at once (their crashes forgotten).
        """
        for scope, old in slots.items():
            self._cancel_revival(old)
            if not old.interests or self._stopping:
                continue
            name = old.key[0]
            if name not in self._servers:
                self._publish(
                    "warning",
                    name,
                    message=f"server {name!r} is gone ({why}): no updates will be "
                    f"delivered for {', '.join(sorted(old.interests))}",
                )
                continue
            fresh = self._slot(name, scope)
            for uri, count in old.interests.items():
                fresh.interests[uri] = fresh.interests.get(uri, 0) + count
            self._revive_later(fresh, 0.0)

    # The catalogue

    async def tools(self, server: str, *, client: str = "") -> list[dict[str, Any]]:
        """The server's tools, listed once per instance and cached until they change."""
        return await self._catalogue(server, "tools", client)

    async def prompts(self, server: str, *, client: str = "") -> list[dict[str, Any]]:
        """The server's prompts, cached like L{tools}."""
        return await self._catalogue(server, "prompts", client)

    async def resources(self, server: str, *, client: str = "") -> list[dict[str, Any]]:
        """The server's resources, cached like L{tools}."""
        return await self._catalogue(server, "resources", client)

    async def templates(self, server: str, *, client: str = "") -> list[dict[str, Any]]:
        """The server's resource templates, cached like L{tools}."""
        return await self._catalogue(server, "templates", client)

    async def _catalogue(self, server: str, kind: str, client: str) -> list[dict[str, Any]]:
        instance = await self._ready(self._slot(server, client))
        cached = instance.catalogue.get(kind)
        if cached is not None:
            return list(cached)
        catalogue = _CATALOGUES[kind]
        assert instance.session is not None
        declaration = instance.session.declaration
        if declaration is not None and not declaration.declares(catalogue.capability):
            return []
        listing = instance.listings.get(kind)
        if listing is None:
            listing = self._list(instance, catalogue)
        return list(await listing.wait())

    def _list(self, instance: _Instance, catalogue: _Catalogue) -> _Outcome[list[dict[str, Any]]]:
        """List one catalogue for everyone who asks while it is listed."""
        kind = catalogue.kind
        version = instance.versions.get(kind, 0)
        listing: _Outcome[list[dict[str, Any]]] = _Outcome()
        instance.listings[kind] = listing

        def listed(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
            if instance.listings.get(kind) is listing:
                del instance.listings[kind]
            if instance.ended is None and instance.versions.get(kind, 0) == version:
                instance.catalogue[kind] = items
            return items

        def unlisted(failure: Failure) -> Failure:
            if instance.listings.get(kind) is listing:
                del instance.listings[kind]
            return failure

        work = Deferred.fromCoroutine(
            self._run(instance, catalogue.method, self._call_timeout, catalogue.fetch)
        )
        work.addCallbacks(listed, unlisted)
        listing.feed(work)
        return listing

    # Status

    def status(self) -> list[ServerStatus]:
        """Every configured server, in the configuration's order."""
        now = self._clock.seconds()
        return [
            self._status(name, config, self._slots.get(name, {}), now)
            for name, config in self._servers.servers.items()
        ]

    def _status(
        self, name: str, config: Server, slots: Mapping[str, _Slot], now: float
    ) -> ServerStatus:
        instances = [slot.instance for slot in slots.values() if slot.instance is not None]
        ready = [i for i in instances if i.usable]
        waits = [
            slot.retry_at - now
            for slot in slots.values()
            if slot.retry_at is not None and slot.retry_at > now
        ]
        # A key whose last instance crashed (or never started) and that has not been
        # started since is failed, even once its back-off has passed: the next use
        # starts it, and until then the state says what happened.
        broken = any(slot.failures and slot.instance is None for slot in slots.values())
        if ready:
            state = ServerState.READY
        elif instances:
            state = ServerState.STARTING
        elif waits or broken:
            state = ServerState.FAILED
        else:
            state = ServerState.CONFIGURED
        era = revision = None
        if ready:
            session = ready[0].session
            assert session is not None
            era = session.era.value
            if session.declaration is not None:
                revision = session.declaration.revision.value
        errors = [slot.last_error for slot in slots.values() if slot.last_error is not None]
        return ServerStatus(
            name=name,
            state=state,
            transport="stdio" if isinstance(config, StdioServer) else "http",
            scope=config.scope.value,
            instances=len(instances),
            in_flight=sum(i.in_flight for i in instances),
            era=era,
            revision=revision,
            last_error=errors[-1] if errors else None,
            retry_in=(min(waits) if waits else 0.0) if state is ServerState.FAILED else None,
        )

    # Restarting and reloading

    async def restart(self, server: str) -> None:
        """
        Close every instance of C{server} and forget its crashes; the next use starts
        it afresh.  Fires once its processes are gone.

        @raise UnknownServer: if C{server} is not configured.
        """
        if server not in self._servers:
            raise UnknownServer(server, self._servers)
        slots = self._slots.pop(server, {})
        await self._close_all(slots, "the server was restarted")
        self._publish("server.restarted", server)
        self._carry_interests(slots, "it was restarted")

    async def reload(self, servers: ServersConfig) -> ReloadReport:
        """
        Take a new configuration: stop the servers it removes, stop the ones it changes
        (the next use starts them with their new configuration), keep the rest warm.
        Fires once the processes stopped are gone.
        """
        old = self._servers
        removed = tuple(name for name in old if name not in servers)
        added = tuple(name for name in servers if name not in old)
        changed = tuple(name for name in servers if name in old and old[name] != servers[name])
        unchanged = tuple(name for name in servers if name in old and old[name] == servers[name])
        self._servers = servers
        self._masker.learn(servers)
        closed = {name: self._slots.pop(name, {}) for name in removed + changed}
        closing = [
            self._close_all(closed[name], "it was removed from the configuration")
            for name in removed
        ] + [self._close_all(closed[name], "its configuration changed") for name in changed]
        for call in closing:
            await call
        for name in changed:
            self._publish("server.restarted", name, reason="its configuration changed")
        for slots in closed.values():
            self._carry_interests(slots, "it was removed from the configuration")
        report = ReloadReport(removed, added, changed, unchanged)
        self.log.info("servers reloaded: {report}", report=report.to_json())
        return report

    def retune(self, settings: Settings) -> None:
        """
        Take the pool's settings that can change while it runs (a reload): the call
        timeout for calls that start from now on, the idle timeout from each instance's
        next idle period, and C{pool.stableAfter}.
        """
        call_timeout = settings.duration("pool.callTimeout")
        idle_timeout = settings.duration("pool.idleTimeout")
        effective_call_timeout(call_timeout, None)
        if idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive, not {idle_timeout!r}")
        self._call_timeout = call_timeout
        self._idle_timeout = idle_timeout
        self._stable_after = settings.duration("pool.stableAfter")
        self._call_max_duration = _at_least_a_call(settings.duration("pool.callMaxDuration"))

    def _close_all(self, slots: Mapping[str, _Slot], why: str) -> Deferred[None]:
        closing = [
            self._close(slot.instance, why, "server.exited")
            for slot in slots.values()
            if slot.instance is not None
        ]
        return gatherResults(closing, consumeErrors=True).addCallback(lambda _: None)

    # The service

    def startService(self) -> None:
        self._stopping = False
        MultiService.startService(self)

    def stopService(self) -> Deferred[None]:
        """Close every instance; fires once every child process has been reaped."""
        self._stopping = True
        for slots in self._slots.values():
            for slot in slots.values():
                self._cancel_revival(slot)
                if slot.instance is not None:
                    self._close(slot.instance, _STOPPING, None)
        self._slots.clear()
        waits: list[Deferred[Any]] = [outcome.wait() for outcome in self._pending]
        stopped = MultiService.stopService(self)
        if isinstance(stopped, Deferred):
            waits.append(stopped)
        done: Deferred[Any] = gatherResults(waits, consumeErrors=True)

        def logged(failure: Failure) -> None:
            self.log.failure("stopping the pool", failure)

        return done.addCallbacks(lambda _: None, logged)
