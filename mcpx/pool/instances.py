# -*- test-case-name: tests.pool.test_pool,tests.pool.test_faults,tests.pool.test_processes -*-
"""
The lives of the pool's instances: slots, starting, back-off, reaping and closing.

An instance is keyed by (server, scope key) and started by the first call that needs
it; calls that arrive while it starts wait for that one start.  It is reaped once
unused for C{pool.idleTimeout} (never while a request is in flight or a resource's
updates are wanted from it); one that dies makes the next start wait a back-off that
doubles with each crash in a row (L{Backoff}), forgotten once an instance stayed up
C{pool.stableAfter}.  A C{client}-scoped server runs at most
C{pool.maxClientInstances} instances, the legacy-era ones of a dual-era server (era
mirroring, L{mcpx.pool.pool.Pool.in_host_era}) among them: a new caller beyond that
replaces the least recently used idle one, whose process is gone before the new one
is spawned.

What the rest of the pool must hear of these lives (an instance up, a start failed, a
crash) goes to the L{LifeWatcher} given to L{Instances.watch}.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeAlias

from attrs import evolve
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred, fail, gatherResults
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from mcpx.auth.caller import per_person
from mcpx.call import Call
from mcpx.lasting import Lasting
from mcpx.once import Once
from mcpx.pool.backoff import Backoff
from mcpx.pool.errors import (
    ServerUnavailable,
    TooManyInstances,
    asked_to_wait,
    format_seconds,
)
from mcpx.pool.instance import (
    POOL_LOG,
    Instance,
    Slot,
    Slots,
    is_mirrored,
    own_scope,
    principal_of_scope,
)
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.servers import Scope, Server, ServersConfig
from mcpx.spec.revision import Era
from mcpx.upstream.handlers import NO_HANDLERS, Question, UpstreamHandlers
from mcpx.upstream.session import UpstreamSession
from mcpx.wire.peer import ConnectionClosed

Publish: TypeAlias = Callable[..., None]
HandlersFor: TypeAlias = Callable[[str, str], UpstreamHandlers]
#: Told of each notification an instance's server sends, before its handlers are.
Heard: TypeAlias = Callable[[Instance, str, "Mapping[str, Any] | None"], None]

#: The message every caller the stop turns away or cuts short is given.
SHUTTING_DOWN = "mcpx is shutting down"

#: How many instances a C{client}-scoped server may run when nothing says otherwise.
DEFAULT_MAX_CLIENT_INSTANCES = 16

#: The setting that caps them.
MAX_CLIENT_INSTANCES_SETTING = "pool.maxClientInstances"

#: When a caller refused for want of an idle instance is told to try again, in seconds.
BUSY_RETRY = 1.0


class Connects(Protocol):
    """What the pool needs of a L{mcpx.upstream.probe.Connector}: open sessions."""

    def connect(
        self,
        name: str,
        server: Server,
        handlers: UpstreamHandlers,
        *,
        principal: str | None = None,
        era: Era | None = None,
    ) -> Coroutine[Any, Any, UpstreamSession]:
        """
        An open session to C{server} (reached with C{principal}'s credentials when
        given; in the legacy era when C{era} says so, for a server found modern: era
        mirroring), or an error naming it.
        """

    #: How long a start may wait for a server's answer to the era probe.
    probe_timeout: float

    def era_known(self, server: Server) -> bool:
        """Whether a start of C{server} opens it in an era known already, unprobed."""


class LifeWatcher(Protocol):
    """What the pool's other parts hear of its instances' lives."""

    def started(self, instance: Instance) -> None:
        """C{instance} is up and may be used."""

    def start_failed(self, slot: Slot, retry_in: float) -> None:
        """An instance of C{slot} could not start; the next may in C{retry_in} seconds."""

    def crashed(self, instance: Instance, retry_in: float) -> None:
        """C{instance} ended on its own; the next may start in C{retry_in} seconds."""


class _Unwatched:
    def started(self, instance: Instance) -> None:
        pass

    def start_failed(self, slot: Slot, retry_in: float) -> None:
        pass

    def crashed(self, instance: Instance, retry_in: float) -> None:
        pass


class Instances:
    """
    Every slot of the pool and the instance each one runs.

    @ivar slots: every slot, and the configuration they are made from.
    @ivar idle_timeout: C{pool.idleTimeout}, from each instance's next idle period.
    @ivar stable_after: C{pool.stableAfter}.
    @ivar stopping: the pool is stopping: nothing starts any more.
    """

    def __init__(
        self,
        *,
        servers: ServersConfig,
        connector: Connects,
        clock: IReactorTime,
        idle_timeout: float,
        publish: Publish,
        heard: Heard,
        handlers: HandlersFor | None,
        backoff: Backoff,
        max_client_instances: int,
        masker: SecretMasker,
        stable_after: float,
        cancel_grace: float,
    ) -> None:
        self.log = POOL_LOG
        self.slots = Slots(servers)
        self.clock = clock
        self.masker = masker
        self.idle_timeout = idle_timeout
        self.stable_after = stable_after
        self.stopping = False
        self._connector = connector
        self._publish_to = publish
        self._heard = heard
        self._handlers = handlers
        self._backoff = backoff
        self._max_client_instances = max_client_instances
        self._cancel_grace = cancel_grace
        self._watcher: LifeWatcher = _Unwatched()
        #: Instances closed on purpose whose process may still run, by server.
        self._closing: dict[str, set[Instance]] = {}
        #: The client-scoped servers whose cap refused a caller since one was last idle.
        self._saturated: Lasting[str] = Lasting()
        #: Starts and closes under way, which stopping waits for.
        self._pending: set[Once[None]] = set()
        #: The next start of each warm server waiting out its back-off, by server.
        self._rewarm: dict[str, IDelayedCall] = {}
        #: The servers found modern that refused a legacy-era session (they speak
        #: 2026-07-28 alone): handshake-era hosts are bridged to their own instance.
        #: Forgotten when the server is restarted or its configuration changes.
        self.modern_only: set[str] = set()

    def watch(self, watcher: LifeWatcher) -> None:
        """Have C{watcher} told of each instance's start, failed start and crash."""
        self._watcher = watcher

    # Events

    def publish(self, kind: str, server: str | None, **data: Any) -> None:
        try:
            self._publish_to(kind, server, **data)
        except Exception:
            self.log.failure("publishing a {kind} event failed", kind=kind)

    # Starting

    def start(self, slot: Slot) -> Instance:
        """
        Start an instance for C{slot}; one that replaces another under
        C{pool.maxClientInstances} is spawned once the other's process is gone.

        @raise ServerUnavailable: if it may not start now.
        @raise TooManyInstances: if it would be one instance too many.
        """
        name, scope = slot.key
        if self.stopping:
            raise ServerUnavailable(name, SHUTTING_DOWN)
        if slot.retry_at is not None:
            wait = slot.retry_at - self.clock.seconds()
            if wait > 0:
                raise ServerUnavailable(name, slot.failure_reason(), wait)
        after = self._room(slot)
        instance = Instance(slot)
        slot.instance = instance
        self.publish("server.starting", name, instance=scope)
        try:
            connecting: Deferred[UpstreamSession]
            if after is None:
                connecting = ensureDeferred(self._connect(instance))
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

    async def _connect_after(self, after: Deferred[None], instance: Instance) -> UpstreamSession:
        try:
            await after
        except CancelledError:
            raise
        except Exception:
            pass  # logged where it was closed; its process is gone all the same
        return await self._connect(instance)

    async def _connect(self, instance: Instance) -> UpstreamSession:
        """
        Open C{instance}'s session: with the credentials of the principal it is for,
        when each principal reaches its server with a sign-in of its own (L{scope_for}).
        """
        config = instance.slot.config
        principal = principal_of_scope(instance.scope) if per_person(config) else None
        handlers = self._handlers_for(instance)
        if is_mirrored(instance.scope):
            return await self._connector.connect(
                instance.name, config, handlers, principal=principal, era=Era.LEGACY
            )
        return await self._connector.connect(instance.name, config, handlers, principal=principal)

    def _room(self, slot: Slot) -> Deferred[None] | None:
        """
        Make room for a new instance of C{slot} under C{pool.maxClientInstances}: C{None}
        when there is room, else a Deferred that fires once the instance it replaces (an
        idle one stopped now, the least recently used, or one already closing) is gone.

        @raise TooManyInstances: when every instance is busy.
        """
        if slot.config.scope is not Scope.CLIENT and not (
            per_person(slot.config) and own_scope(slot.key[1])
        ):
            # A shared server's one instance (one per era for a dual-era server), or the
            # owner's of a server each principal signs in to (the subjects' cannot crowd
            # it out), is never refused.
            return None
        name = slot.key[0]
        limit = self._max_client_instances
        running = [s.instance for s in self.slots.of(name).values() if s.instance]
        closing = [i for i in self._closing.get(name, ()) if not i.claimed]
        if len(running) + len(closing) < limit:
            return None
        if closing:
            victim = closing[0]
        else:
            idle = [i for i in running if i.usable and not i.in_flight and not i.slot.interests]
            if not idle:
                if self._saturated.begins(name):
                    self.log.warn(
                        "upstream {server}: all {limit} instances are busy, refusing new "
                        "callers until one is idle ({setting})",
                        server=name,
                        limit=limit,
                        setting=MAX_CLIENT_INSTANCES_SETTING,
                    )
                raise TooManyInstances(name, limit, MAX_CLIENT_INSTANCES_SETTING, BUSY_RETRY)
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
            self.slots.forget(victim.slot)
        self._saturated.ends(name)
        victim.claimed = True
        return self._close(victim, victim.ended or "", None)

    def _started(self, session: UpstreamSession, instance: Instance) -> None:
        instance.session = session
        name, scope = instance.slot.key
        if instance.ended is not None:
            # Closed while starting, too late for the start to be cancelled.
            self._close_session(instance)
            return
        instance.last_used = instance.up_since = self.clock.seconds()
        if is_mirrored(scope) and session.era is Era.MODERN:
            # It took no legacy-era session: from now on its own instance serves
            # every host, and this one is reaped once idle.
            self.modern_only.add(name)
        declaration = session.declaration
        self.log.info(
            "upstream {server} started ({era}, {revision})",
            server=name,
            era=session.era.value,
            revision=declaration.revision.value if declaration is not None else None,
        )
        self.publish(
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
            self._schedule_idle(instance, self.idle_timeout)
            self._watcher.started(instance)

    def _start_failed(self, failure: Failure, instance: Instance) -> None:
        name, scope = instance.slot.key
        if instance.ended is not None:
            if not failure.check(CancelledError):
                self.log.info(
                    "upstream {server} failed while being closed: {why}",
                    server=name,
                    why=failure.getErrorMessage(),
                )
            return
        why = self.masker.mask(failure.getErrorMessage() or repr(failure.value))
        self.log.warn("upstream {server} could not be started: {why}", server=name, why=why)
        retry_in = self._failed(
            instance, f"could not start: {why}", crashed=False, asked=asked_to_wait(failure.value)
        )
        self.publish("server.failed", name, instance=scope, error=why, retry_in=retry_in)
        self._watcher.start_failed(instance.slot, retry_in)
        self._warm_later(name, retry_in)

    def _failed(
        self, instance: Instance, why: str, *, crashed: bool, asked: float | None = None
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
        self.forgive(instance)
        slot.failures += 1
        slot.crashed_last = crashed
        slot.last_error = why
        delay = self._backoff.delay(slot.failures) if asked is None else asked
        slot.retry_at = self.clock.seconds() + delay
        return delay

    def _handlers_for(self, instance: Instance) -> UpstreamHandlers:
        """
        The injected handlers, with the pool listening to every notification first, and
        told of every question the server asks (L{AppReads.asked}: a read in flight may
        depend on whoever answers it, so it is not kept for others).
        """
        base = self._handlers(*instance.slot.key) if self._handlers is not None else NO_HANDLERS
        also = base.notification

        def heard(method: str, params: Mapping[str, Any] | None) -> None:
            self._heard(instance, method, params)
            if also is not None:
                also(method, params)

        def telling(question: Question | None) -> Question | None:
            if question is None:
                return None

            def asked(params: Mapping[str, Any]) -> Awaitable[Mapping[str, Any]]:
                instance.catalogue.app_reads.asked()
                return question(params)

            return asked

        relay = base.relay

        def relayed(
            method: str, params: Mapping[str, Any], call: Call | None, key: str | None
        ) -> Awaitable[Mapping[str, Any]]:
            instance.catalogue.app_reads.asked()
            assert relay is not None
            return relay(method, params, call, key)

        return evolve(
            base,
            notification=heard,
            elicitation=telling(base.elicitation),
            sampling=telling(base.sampling),
            roots=telling(base.roots),
            relay=relayed if relay is not None else None,
        )

    async def ready(self, slot: Slot, within: float | None = None) -> Instance:
        """
        The slot's instance, started if need be.

        @param within: the longest to wait for a start (a call's own bound); the start
            goes on after the wait is given up.
        """
        instance = slot.instance
        if instance is not None and instance.usable:
            return instance
        if instance is None:
            instance = self.start(slot)
        if not instance.ready.done:
            waiting = instance.ready.wait()
            if within is not None:
                waiting.addTimeout(within, self.clock)
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

    async def claim(self, slot: Slot, within: float | None = None) -> Instance:
        """L{ready}, with the slot counted as taken while its instance starts."""
        slot.claims += 1
        try:
            return await self.ready(slot, within)
        finally:
            slot.claims -= 1

    def _unavailable(self, instance: Instance, prefix: str = "") -> ServerUnavailable:
        slot = instance.slot
        if instance.failed:
            retry_in = None
            if slot.retry_at is not None:
                retry_in = max(0.0, slot.retry_at - self.clock.seconds())
            return ServerUnavailable(instance.name, prefix + slot.failure_reason(), retry_in)
        return ServerUnavailable(instance.name, prefix + (instance.ended or "it is not running"))

    # Losing an instance

    def _lost(self, failure: Failure, instance: Instance) -> None:
        if instance.ended is None:
            self._crashed(instance, failure.getErrorMessage())

    def _crashed(self, instance: Instance, why: str) -> None:
        name, scope = instance.slot.key
        why = self.masker.mask(why)
        retry_in = self._failed(instance, why, crashed=True)
        self.log.warn(
            "upstream {server} ended unexpectedly: {why}; next start in {delay}",
            server=name,
            why=why,
            delay=format_seconds(retry_in),
        )
        self.publish(
            "server.exited",
            name,
            instance=scope,
            reason=why,
            crashes=instance.slot.failures,
            retry_in=retry_in,
        )
        self._watcher.crashed(instance, retry_in)
        self._close_session(instance)
        self._warm_later(name, retry_in)

    def _close_session(self, instance: Instance) -> Once[None]:
        """Close the session (releasing the process) once; the outcome fires when it is reaped."""
        if instance.closed is None:
            assert instance.session is not None
            instance.closed = self._track(
                instance.session.close(), f"closing upstream {instance.name!r}"
            )
        return instance.closed

    def cut_short(self, instance: Instance, error: BaseException) -> ServerUnavailable:
        """The error for a request whose connection went away under it."""
        if instance.ended is None:
            cause = error.reason if isinstance(error, ConnectionClosed) else error
            self._crashed(instance, str(cause))
        return self._unavailable(instance, "the call was cut short: ")

    # Closing on purpose

    def _close(self, instance: Instance, why: str, event: str | None) -> Deferred[None]:
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
            done.addCallback(lambda _: self.publish(event, name, instance=scope, reason=why))
        return done

    def _cancel_idle(self, instance: Instance) -> None:
        if instance.idle_timer is not None:
            if instance.idle_timer.active():
                instance.idle_timer.cancel()
            instance.idle_timer = None

    def _schedule_idle(self, instance: Instance, delay: float) -> None:
        instance.idle_timer = self.clock.callLater(delay, self._idle_check, instance)

    def _idle_check(self, instance: Instance) -> None:
        instance.idle_timer = None
        if instance.ended is not None or instance.in_flight or instance.slot.interests:
            # Rescheduled by whatever ends the activity.
            return
        idle = self.clock.seconds() - instance.last_used
        # A warm server keeps its instances, but not one opened in place of a legacy-era
        # instance that its server (modern only) refused: nothing uses it any more.
        needless = is_mirrored(instance.scope) and instance.name in self.modern_only
        if idle < self.idle_timeout or (self.is_warm(instance.name) and not needless):
            # A warm server is looked at again, to be reaped once a reload cools it.
            self._schedule_idle(instance, max(self.idle_timeout - idle, 0) or self.idle_timeout)
            return
        self.log.info(
            "stopping upstream {server}: unused for {idle}",
            server=instance.name,
            idle=format_seconds(idle),
        )
        self._close(instance, f"unused for {format_seconds(idle)}", "server.reaped")
        self.slots.forget(instance.slot)

    def _track(self, work: Deferred[Any], what: str) -> Once[None]:
        """Keep C{work} until it ends, so stopping waits for it; its failure is logged."""
        outcome: Once[None] = Once()

        def ended(result: object) -> None:
            self._pending.discard(outcome)
            if isinstance(result, Failure) and not result.check(CancelledError):
                self.log.failure("{what} failed", result, what=what)

        self._pending.add(outcome)
        work.addBoth(ended)
        outcome.feed(work)
        return outcome

    # Requests

    def forgive(self, instance: Instance) -> None:
        """
        Forget the crashes before C{instance} once it has stayed up C{stable_after}:
        answering one call proves nothing of a server that dies half a second after
        each start, and the delay must keep growing for it.
        """
        up_since = instance.up_since
        if (
            up_since is not None
            and instance.slot.failures
            and self.clock.seconds() - up_since >= self.stable_after
        ):
            instance.slot.failures = 0

    def finished(self, instance: Instance, now: float | None = None) -> None:
        """
        A request on C{instance} ended.

        @param now: the clock's time now, where the caller read it in the same
            synchronous step (L{mcpx.pool.requests.Requests.run}); else it is read here.
        """
        instance.in_flight -= 1
        if instance.in_flight == 0:
            instance.last_used = self.clock.seconds() if now is None else now
            if instance.idle_timer is None:
                # Else its idle check, due already, looks at last_used.
                self.idle_again(instance)

    def idle_again(self, instance: Instance) -> None:
        if (
            instance.idle_timer is None
            and instance.ended is None
            and not instance.in_flight
            and not instance.slot.interests
        ):
            self._schedule_idle(instance, self.idle_timeout)

    def close_all(self, slots: Mapping[str, Slot], why: str) -> Deferred[None]:
        closing = [
            self._close(slot.instance, why, "server.exited")
            for slot in slots.values()
            if slot.instance is not None
        ]
        return gatherResults(closing, consumeErrors=True).addCallback(lambda _: None)

    def free(self, slot: Slot) -> bool:
        """Whether no call is on the slot, nor waiting for it, nor given up on there."""
        if slot.claims:
            return False
        instance = slot.instance
        if instance is None:
            return True
        return instance.ended is None and not instance.in_flight and not instance.late

    # Warm servers

    def is_warm(self, server: str) -> bool:
        """Whether the configuration keeps C{server} running from the daemon's start."""
        config = self.slots.servers.servers.get(server)
        return config is not None and config.warm

    def warm_up(self) -> None:
        """Start each warm server that runs no instance, or once its back-off is over."""
        for name in self.slots.servers:
            self._warm(name)

    def _warm(self, server: str) -> None:
        self._rewarm.pop(server, None)
        if self.stopping or not self.is_warm(server):
            return
        slot = self.slots.slot(server, "")
        if slot.instance is not None:
            return
        if slot.retry_at is not None and slot.retry_at > self.clock.seconds():
            self._warm_later(server, slot.retry_at - self.clock.seconds())
            return
        self.start(slot)

    def _warm_later(self, server: str, delay: float) -> None:
        if self.stopping or not self.is_warm(server) or server in self._rewarm:
            return
        self._rewarm[server] = self.clock.callLater(delay, self._warm, server)

    # Stopping

    def stop(self) -> Deferred[Any]:
        """Close every instance; fires once every start and close under way has ended."""
        self.stopping = True
        for waiting in self._rewarm.values():
            waiting.cancel()
        self._rewarm.clear()
        for slot in self.slots.every():
            if slot.instance is not None:
                self._close(slot.instance, SHUTTING_DOWN, None)
        self.slots.clear()
        waits: list[Deferred[Any]] = [outcome.wait() for outcome in self._pending]
        return gatherResults(waits, consumeErrors=True)
