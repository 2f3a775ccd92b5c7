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
  - If it dies, the call that was running fails with
    L{mcpx.pool.errors.ServerUnavailable} naming the server and how it ended, and the
    next call starts a fresh one, after a delay that doubles with each crash in a row
    (L{Backoff}); a call that arrives before then fails at once, saying when the next
    start will be.
  - L{Pool.restart}, L{Pool.reload} and stopping the service close instances on
    purpose; a call they cut short says so.
  - A C{client}-scoped server runs at most C{pool.maxClientInstances} instances.  A
    new caller beyond that takes the place of the least recently used idle one, which
    is stopped first (its process is gone before the new one is spawned); when every
    one is busy the call fails at once with L{mcpx.pool.errors.TooManyInstances}.
  - A C{shared} server that asked a question on its connection while several calls
    were in flight (so the question could not be given to any of them) is known from
    then on to ask: each call made for a caller gets an instance to itself, an idle one
    reused or a new one, up to C{pool.maxAskingInstances} for that server (keys
    C{ask-1}, C{ask-2}, ...); past that, calls share again.  See L{Pool.owner}.
  - A request mcpx gave up on (cancelled, timed out) still counts on its connection,
    as nobody's, until the server answers it or C{pool.cancelGrace} passes: a server
    may go on asking for it, and such a question is nobody's to answer.  Not against a
    later call of the host that made it, which alone could be shown such a question
    (L{mcpx.pool.attribution.same_host}): a server may never answer a cancelled request.
  - A dual-era server (found modern, and taking C{initialize} too) meets the calls
    of handshake-era hosts in their era (era mirroring, spec/era-mirroring.md): such a
    call runs on a legacy-era instance beside the server's own (scope key
    C{legacy|<scope>}), started by the first such call and kept like any other,
    within the same bounds.  A server that refuses it speaks 2026-07-28 alone: its own
    instance serves every host, bridged as before.  See L{Pool.in_host_era}.
  - A request made for nobody (its client declared nothing it could be asked: the
    fast path, with no caller) that is alone in flight on its connection when its
    server asks owns the question all the same (L{Pool.lone_request}): the question is named
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

L{Pool} is a façade over the parts that do this, each with its own state: the
instances' lives (L{mcpx.pool.instances}), attribution (L{mcpx.pool.attribution}),
the requests and their progress (L{mcpx.pool.requests}, L{mcpx.pool.progress}),
interests in resources (L{mcpx.pool.interests}) and each instance's catalogue
(L{mcpx.pool.catalogue}).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from attrs import define
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from mcpx import tracing
from mcpx.auth.caller import attributed_to, per_person, principal_of
from mcpx.call import Call
from mcpx.pool.attribution import (
    DEFAULT_MAX_ASKING_INSTANCES,
    MAX_ASKING_INSTANCES_SETTING,
    Attribution,
    NobodysRequest,
)
from mcpx.pool.backoff import Backoff
from mcpx.pool.budget import effective_call_timeout
from mcpx.pool.catalogue import Catalogue, is_app_read
from mcpx.pool.errors import UnknownServer
from mcpx.pool.instance import (
    POOL_LOG,
    Instance,
    Slot,
    is_mirrored,
    own_scope,
    scope_for,
)
from mcpx.pool.instances import (
    DEFAULT_MAX_CLIENT_INSTANCES,
    MAX_CLIENT_INSTANCES_SETTING,
    Connects,
    HandlersFor,
    Instances,
    Publish,
)
from mcpx.pool.interests import Interests
from mcpx.pool.progress import ProgressSink
from mcpx.pool.requests import OnCall, Requests, at_least_a_call, raising
from mcpx.pool.status import ReloadReport, ServerStatus, server_status
from mcpx.settings.resolve import Settings
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.servers import Scope, ServersConfig
from mcpx.spec.methods import RESOURCE_UPDATED, SUBSCRIBE, UNSUBSCRIBE
from mcpx.spec.revision import Era
from mcpx.upstream.handlers import declared_in
from mcpx.upstream.records import ServerDeclaration
from mcpx.upstream.session import UpstreamSession

__all__ = [
    "CANCEL_GRACE_SETTING",
    "DEFAULT_CANCEL_GRACE",
    "DEFAULT_MAX_ASKING_INSTANCES",
    "DEFAULT_MAX_CLIENT_INSTANCES",
    "MAX_ASKING_INSTANCES_SETTING",
    "MAX_CLIENT_INSTANCES_SETTING",
    "Connects",
    "NobodysRequest",
    "Pool",
]

#: How long a request given up on still counts as running at its server, in seconds.
DEFAULT_CANCEL_GRACE = 30.0

#: The setting that says so.
CANCEL_GRACE_SETTING = "pool.cancelGrace"


def _no_events(kind: str, server: str | None = None, **data: Any) -> None:
    """The default publisher: events go nowhere."""


@define
class _ToolCall:
    """One call of L{Pool.call_tool}, as it is sent once an instance serves it."""

    tool: str
    arguments: Mapping[str, Any] | None
    #: The bound on it (L{effective_call_timeout}).
    bound: float
    #: When it was asked for.
    asked: float
    meta: Mapping[str, Any] | None
    on_progress: ProgressSink | None
    call: Call | None
    #: Whose it is (L{principal_of}).
    principal: str | None


class Pool(MultiService):
    """
    Upstream servers, started on first use, kept warm, reaped when idle, replaced when
    they die.  A Twisted service: stopping it closes every instance and waits until
    every child process has been reaped.
    """

    log = POOL_LOG

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
        on_call: OnCall | None = None,
    ) -> None:
        """
        @param connector: opens sessions (L{mcpx.upstream.connect.make_connector}).
        @param call_timeout: C{pool.callTimeout}: the longest one upstream request may take.
        @param idle_timeout: C{pool.idleTimeout}: how long an unused instance is kept.
        @param publish: C{publish(kind, server, **data)} for each event.
        @param handlers: the L{mcpx.upstream.handlers.UpstreamHandlers} for an instance,
            from (server, scope key).
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
        #: C{(server, tool, seconds, outcome, principal)}, outcome C{ok}, C{tool_error}
        #: or C{error}, principal the subject identity it was made for
        #: (L{mcpx.auth.caller.principal_of}) or C{None}.
        self.on_call = on_call
        effective_call_timeout(call_timeout, None)  # refuses a bound that is no bound
        if idle_timeout <= 0:
            raise ValueError(f"idle_timeout must be positive, not {idle_timeout!r}")
        if max_client_instances < 1:
            raise ValueError(
                f"max_client_instances must be at least 1, not {max_client_instances!r}"
            )
        if max_asking_instances < 1:
            raise ValueError(
                f"max_asking_instances must be at least 1, not {max_asking_instances!r}"
            )
        if cancel_grace < 0:
            raise ValueError(f"cancel_grace must not be negative, not {cancel_grace!r}")
        self._clock = clock
        self._connector = connector
        self._instances = Instances(
            servers=servers,
            connector=connector,
            clock=clock,
            idle_timeout=idle_timeout,
            publish=publish,
            heard=self._heard,
            handlers=handlers,
            backoff=backoff or Backoff(),
            max_client_instances=max_client_instances,
            masker=masker if masker is not None else SecretMasker(servers),
            stable_after=stable_after,
            cancel_grace=cancel_grace,
        )
        self._attribution = Attribution(self._instances, max_asking_instances=max_asking_instances)
        self._requests = Requests(
            self._instances,
            self._attribution,
            call_timeout=call_timeout,
            call_max_duration=call_max_duration,
        )
        self._interests = Interests(self._instances, self._requests)
        self._instances.watch(self._interests)

    # Keys

    @property
    def servers(self) -> ServersConfig:
        return self._instances.slots.servers

    def scope_key(self, server: str, client: str) -> str:
        """
        The scope key a call from C{client} uses (L{scope_for}): the client's identity
        for a C{client}-scoped server, its principal for a shared one each principal
        signs in to for itself, C{""} for any other.

        @raise UnknownServer: if C{server} is not configured.
        """
        config = self._instances.slots.servers.servers.get(server)
        if config is None:
            raise UnknownServer(server, self._instances.slots.servers)
        return scope_for(config, client)

    def in_flight(self, server: str, scope_key: str) -> int:
        """Upstream requests in flight on one instance, whoever made them."""
        instance = self._instances.slots.find(server, scope_key)
        return instance.in_flight if instance is not None else 0

    # Attribution (L{Attribution})

    def owner(self, server: str, scope_key: str) -> Call | None:
        """L{Attribution.owner}: the one call of a connection's requests, if one."""
        return self._attribution.owner(server, scope_key)

    def lone_request(self, server: str, scope_key: str) -> NobodysRequest | None:
        """L{Attribution.lone_request}: the request made for nobody alone in flight."""
        return self._attribution.lone_request(server, scope_key)

    def calls(self, server: str, scope_key: str) -> list[Call | None]:
        """The calls the requests in flight on (C{server}, C{scope_key}) are for, in order."""
        return self._attribution.calls(server, scope_key)

    def hold_deadlines(self, server: str, scope_key: str) -> Callable[[], None]:
        """L{Attribution.hold_deadlines}: pause a connection's clocks for a question."""
        return self._attribution.hold_deadlines(server, scope_key)

    # Notifications

    def _heard(self, instance: Instance, method: str, params: Mapping[str, Any] | None) -> None:
        if instance.catalogue.heard(method, params):
            return
        given: Mapping[str, Any] = params if params is not None else {}
        # What the server says is the principal's whose requests are all it is serving;
        # said between calls, or during several principals' calls, the owner's alone.
        principals = instance.principals
        principal = (
            principals[0]
            if principals and principals.count(principals[0]) == len(principals)
            else None
        )
        if method == "notifications/message":
            self._instances.publish(
                "server.log",
                instance.name,
                **attributed_to(principal),
                level=given.get("level"),
                logger=given.get("logger"),
                data=given.get("data"),
            )
        elif method == RESOURCE_UPDATED:
            uri = given.get("uri")
            if isinstance(uri, str):
                self._instances.publish("resource.updated", instance.name, uri=uri)
        elif method == "notifications/progress":
            token = given.get("progressToken")
            self._instances.publish(
                "progress",
                instance.name,
                **attributed_to(principal),
                progressToken=token,
                progress=given.get("progress"),
                total=given.get("total"),
                message=given.get("message"),
            )
            self._requests.progress.heard(given)

    def notify(self, server: str, client: str, method: str) -> int:
        """
        Send C{method} (a notification without params) to the running instances that
        serve C{client}: every instance of a C{shared} server, the client's own of a
        C{client}-scoped one; none is started for it.

        @return: how many instances it was sent to.
        """
        config = self._instances.slots.servers.servers.get(server)
        if config is None:
            return 0
        slots = self._instances.slots.of(server)
        if config.scope is Scope.CLIENT or per_person(config):
            scope = scope_for(config, client)
            # Its own, in either era, whatever questions its hosts declared (L{declared_in}).
            chosen = [
                slot for key, slot in slots.items() if own_scope(declared_in(key)[0]) == scope
            ]
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

    # Requests

    async def session(self, server: str, client: str = "") -> UpstreamSession:
        """
        The session of the instance serving C{client}, started if need be.

        Requests sent on it directly are not counted in flight and do not keep the
        instance from being reaped; use L{request} where that matters.

        @raise UnknownServer: if C{server} is not configured.
        @raise ServerUnavailable: if it cannot be started now.
        """
        instance = await self._instances.ready(self._instances.slots.slot(server, client))
        instance.last_used = self._clock.seconds()
        assert instance.session is not None
        return instance.session

    def probe_wait(self, server: str) -> float:
        """
        How long a start of C{server} may spend finding its era before it starts in
        earnest (L{mcpx.upstream.probe.Connector.era_known}): the probe's timeout when
        it has none pinned or remembered, else nothing.  A listing waits this much
        longer for it (L{mcpx.server.catalogues.Catalogues.waited}), so the first host to
        meet a server whose SDK ends the connection on the probe still lists it.
        """
        config = self._instances.slots.servers.servers.get(server)
        if config is None or self._connector.era_known(config):
            return 0.0
        return self._connector.probe_timeout

    def running_declaration(self, server: str, client: str = "") -> ServerDeclaration | None:
        """
        What the instance serving C{client} declared, when a usable one is running now;
        else C{None} (nothing is started: see L{session}).
        """
        instance = self._instances.slots.running(server, client)
        if instance is None or instance.session is None:
            return None
        return instance.session.declaration

    def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        client: str = "",
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
        on_progress: ProgressSink | None = None,
        call: Call | None = None,
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """
        Call a tool.

        The coroutine handed back is the request's own (L{Requests.run}) when an
        instance serving the call runs now (untraced, no host's era to meet): no
        coroutine of the pool's around it, which each step of the call passed through.

        @param timeout: a bound shorter than C{pool.callTimeout} for this call; a longer
            one is clamped to it.
        @param on_progress: called with the params of each C{notifications/progress}
            the server sends about this call.  Every call carries a progress token of
            the pool's own (C{mcpx-<n>}), and each report about it gives the call its
            bound again, up to C{pool.callMaxDuration} in all (L{mcpx.pool.budget}).
        @param call: the call it is made for (L{mcpx.call.Call}): its
            questions may be put to that call's client, see L{Attribution.owner}.
        @return: the C{CallToolResult}, when awaited.
        @raise UnknownServer: if C{server} is not configured.
        @raise ServerUnavailable: if it cannot be started, or died during the call.
        @raise CallTimedOut: if it did not answer in time.
        @raise mcpx.wire.errors.RpcError: as the server answered.
        """
        try:
            configured = self._requests.call_timeout
            # C{pool.callTimeout} was checked when it was set (L{Requests}, L{retune}): a
            # call with no bound of its own takes it as it is.
            bound = configured if timeout is None else effective_call_timeout(configured, timeout)
            asked = self._clock.seconds()
            # An unknown server is refused before anything is counted for it.
            slot = self._attribution.slot_for(server, client, call)
            # In the host's era (L{in_host_era}), unless a start must be waited for to know.
            in_era = (
                slot
                if call is None or not call.legacy
                else self._in_host_era_now(slot, client, call)
            )
        except Exception as e:
            return raising(e)
        sending = _ToolCall(
            tool, arguments, bound, asked, meta, on_progress, call, principal_of(client)
        )
        running = in_era.instance if in_era is not None else None
        if tracing.ON or running is None or not running.usable:
            return self._call_tool_waiting(
                slot if in_era is None else in_era,
                sending,
                era_known=in_era is not None,
                client=client,
            )
        # A running instance is taken at once: nothing to wait for, nor to count as
        # waited for (L{Instances.claim}).
        try:
            return self._tool_call(running, sending)
        except Exception as e:
            self._call_failed(server, sending)
            return raising(e)

    async def _call_tool_waiting(
        self, slot: Slot, sending: _ToolCall, *, era_known: bool, client: str
    ) -> dict[str, Any]:
        """
        L{call_tool}, where an instance must be waited for, or spans made.

        @param era_known: C{slot} is in the host's era already (L{in_host_era}).
        """
        server = slot.key[0]
        try:
            if not era_known:
                slot = await self.in_host_era(slot, client, sending.call, sending.bound)
            with tracing.span("mcpx.pool.wait", {"mcpx.server": server}):
                instance = await self._instances.claim(slot, sending.bound)
        except BaseException:
            self._call_failed(server, sending)
            raise
        with tracing.span(
            "mcpx.upstream tools/call", {"mcpx.server": server, "gen_ai.tool.name": sending.tool}
        ) as span:
            try:
                calling = self._tool_call(instance, sending, traced=span is not None)
            except Exception:
                self._call_failed(server, sending)
                raise
            result = await calling
            tracing.outcome(span, result)
        return result

    def _tool_call(
        self, instance: Instance, sending: _ToolCall, *, traced: bool = False
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """
        The request of L{call_tool} on C{instance}, under a progress token of its own.

        @param traced: it runs in a span: the upstream's spans are children of it, and
            so are the questions it asks for this call.
        """
        token = self._requests.progress.token()
        meta = sending.meta
        sent = {**meta, "progressToken": token} if meta else {"progressToken": token}
        call = sending.call
        if traced:
            tracing.inject(sent)
            tracing.remember(call)
        session = instance.session
        assert session is not None
        tool = sending.tool
        return self._requests.run(
            instance,
            tool,
            sending.bound,
            session.call_tool(tool, sending.arguments, meta=sent, call=call),
            call,
            asked=sending.asked,
            progress=token,
            on_progress=sending.on_progress,
            principal=sending.principal,
            on_call=self.on_call,
        )

    def _call_failed(self, server: str, sending: _ToolCall) -> None:
        """A call of L{call_tool} failed before its request ran: L{on_call} is told."""
        if self.on_call is not None:
            self.on_call(
                server,
                sending.tool,
                self._clock.seconds() - sending.asked,
                "error",
                sending.principal,
            )

    async def request(
        self,
        server: str,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        client: str = "",
        timeout: float | None = None,
        call: Call | None = None,
    ) -> dict[str, Any]:
        """
        Send any request (questions the server asks on the way are answered through the
        handlers, knowing C{call}, as for L{call_tool}).  C{resources/subscribe} and
        C{resources/unsubscribe} go through L{subscribe} and L{unsubscribe}, so the pool
        knows what is open.

        @raise UnknownServer: if C{server} is not configured.
        @raise ServerUnavailable: if it cannot be started, or died during the request.
        @raise CallTimedOut: if it did not answer in time.
        """
        if method in (SUBSCRIBE, UNSUBSCRIBE):
            uri = (params or {}).get("uri")
            if not isinstance(uri, str):
                raise ValueError(f"{method} needs a uri")
            if method == SUBSCRIBE:
                await self.subscribe(server, uri, client=client, timeout=timeout)
            else:
                await self.unsubscribe(server, uri, client=client, timeout=timeout)
            return {}
        app = is_app_read(method, params)
        if app is not None:
            # An app's resource, kept in the catalogue (AppReads): not asked again.
            kept = self._kept_app_read(server, client, app)
            if kept is not None:
                return kept
        bound = effective_call_timeout(self._requests.call_timeout, timeout)
        asked = self._clock.seconds()
        slot = self._attribution.slot_for(server, client, call)
        slot = await self.in_host_era(slot, client, call, bound)
        with tracing.span("mcpx.pool.wait", {"mcpx.server": server}):
            instance = await self._instances.claim(slot, bound)
        reads = instance.catalogue.app_reads
        version = reads.version
        with tracing.span(f"mcpx.upstream {method}", {"mcpx.server": server}) as span:
            if span is not None:
                tracing.remember(call)
                params = dict(params or {})
                meta = params.get("_meta")
                params["_meta"] = meta = dict(meta) if isinstance(meta, Mapping) else {}
                tracing.inject(meta)
            session = instance.session
            assert session is not None
            result = await self._requests.run(
                instance,
                method,
                bound,
                session.call(method, params, call=call),
                call,
                asked=asked,
                principal=principal_of(client),
            )
        if app is not None and instance.usable:
            reads.keep(app, result, self._clock.seconds(), version)
        return result

    def _kept_app_read(self, server: str, client: str, uri: str) -> dict[str, Any] | None:
        """The read of app resource C{uri} the instance serving C{client} keeps, or C{None}."""
        instance = self._instances.slots.running(server, client)
        if instance is None:
            return None
        kept = instance.catalogue.app_reads.get(uri, self._clock.seconds())
        if kept is not None:
            instance.last_used = self._clock.seconds()
        return kept

    async def in_host_era(self, slot: Slot, client: str, call: Call | None, within: float) -> Slot:
        """
        The slot a request for C{call} runs on, C{slot} (L{Attribution.slot_for}) in
        the era of the host that made it where the server speaks both (era mirroring): a
        handshake-era host's call (C{call.legacy}) to a server found modern goes to
        the legacy-era instance beside the server's own, unless the server's entry
        pins a C{protocol} or the server turned out to speak 2026-07-28 alone.  Which
        era the server's own instance speaks is known once it runs: when none does
        yet, it is started first (and serves the catalogue anyway).

        @param within: the longest to wait for the server's own instance to start.
        """
        known = self._in_host_era_now(slot, client, call)
        if known is not None:
            return known
        instance = await self._instances.claim(slot, within)
        assert instance.session is not None
        return self._in_era(slot, client, call, instance.session.era)

    def _in_host_era_now(self, slot: Slot, client: str, call: Call | None) -> Slot | None:
        """
        L{in_host_era}'s slot when no start need be waited for to know it; else C{None}.
        """
        if (
            not (call is not None and call.legacy)
            or slot.config.protocol
            or slot.key[0] in self._instances.modern_only
        ):
            return slot
        era = self._own_era(slot.key[0])
        return None if era is None else self._in_era(slot, client, call, era)

    def _in_era(self, slot: Slot, client: str, call: Call | None, era: Era) -> Slot:
        """The slot of L{in_host_era}, its server's own instances speaking C{era}."""
        server = slot.key[0]
        if era is not Era.MODERN or server in self._instances.modern_only:
            return slot
        return self._attribution.slot_for(server, client, call, legacy=True)

    def _own_era(self, server: str) -> Era | None:
        """
        The era C{server}'s own (not mirrored) instances speak, as far as a running
        instance tells: its own; L{Era.MODERN} when only a legacy-era instance runs (its
        own instance crashed or was reaped: it was found modern, or there would be no
        mirror); C{None} when nothing running tells.
        """
        mirrored = False
        for key, slot in self._instances.slots.of(server).items():
            instance = slot.instance
            if instance is None or not instance.usable:
                continue
            assert instance.session is not None
            if not is_mirrored(key):
                return instance.session.era
            mirrored = mirrored or instance.session.era is Era.LEGACY
        return Era.MODERN if mirrored else None

    # The catalogue (L{mcpx.pool.catalogue})

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

    def cached_catalogue(
        self, server: str, kind: str, *, client: str = ""
    ) -> list[dict[str, Any]] | None:
        """
        The server's C{kind} catalogue (C{"tools"}, C{"prompts"}, ...) when a usable
        instance has it cached now, else C{None}: then L{tools} and the like fetch it
        (or say why they cannot).  What a caller on the hot path takes without waiting;
        the list is the cache's own, to read and not to change.
        """
        instance = self._instances.slots.running(server, client)
        if instance is None:
            return None
        return instance.catalogue.cached(kind)

    async def _catalogue(self, server: str, kind: str, client: str) -> list[dict[str, Any]]:
        instance = await self._instances.ready(self._instances.slots.slot(server, client))
        session = instance.session
        assert session is not None
        timeout = self._requests.call_timeout

        def fetch(catalogue: Catalogue) -> Deferred[list[dict[str, Any]]]:
            return Deferred.fromCoroutine(
                self._requests.run(instance, catalogue.method, timeout, catalogue.fetch(session))
            )

        return await instance.catalogue.get(kind, session, fetch, lambda: instance.ended is None)

    # Subscriptions (L{Interests})

    async def subscribe(
        self, server: str, uri: str, *, client: str = "", timeout: float | None = None
    ) -> None:
        """L{Interests.subscribe}: hold one interest in a resource's updates."""
        await self._interests.subscribe(server, uri, client=client, timeout=timeout)

    async def unsubscribe(
        self, server: str, uri: str, *, client: str = "", timeout: float | None = None
    ) -> None:
        """L{Interests.unsubscribe}: release one interest held by L{subscribe}."""
        await self._interests.unsubscribe(server, uri, client=client, timeout=timeout)

    # Status

    def status(self) -> list[ServerStatus]:
        """Every configured server, in the configuration's order."""
        now = self._clock.seconds()
        return [
            server_status(name, config, self._instances.slots.of(name), now)
            for name, config in self._instances.slots.servers.servers.items()
        ]

    # Restarting and reloading

    async def restart(self, server: str, *, principal: str | None = None) -> None:
        """
        Close every instance of C{server} and forget its crashes; the next use starts
        it afresh.  Fires once its processes are gone.

        @param principal: only the instances reached with this principal's sign-in
            (after its sign-in), leaving every other caller's calls alone.
        @raise UnknownServer: if C{server} is not configured.
        """
        if server not in self._instances.slots.servers:
            raise UnknownServer(server, self._instances.slots.servers)
        slots = self._instances.slots.pop(server, principal)
        self._instances.modern_only.discard(server)
        await self._instances.close_all(slots, "the server was restarted")
        self._instances.publish("server.restarted", server)
        self._interests.carry(slots, "it was restarted")
        self._instances.warm_up()

    async def reload(self, servers: ServersConfig) -> ReloadReport:
        """
        Take a new configuration: stop the servers it removes, stop the ones it changes
        (the next use starts them with their new configuration), keep the rest warm.
        Fires once the processes stopped are gone.
        """
        old = self._instances.slots.servers
        removed = tuple(name for name in old if name not in servers)
        added = tuple(name for name in servers if name not in old)
        changed = tuple(name for name in servers if name in old and old[name] != servers[name])
        unchanged = tuple(name for name in servers if name in old and old[name] == servers[name])
        self._instances.slots.servers = servers
        self._instances.masker.learn(servers)
        closed = {name: self._instances.slots.pop(name) for name in removed + changed}
        self._instances.modern_only.difference_update(removed + changed)
        closing = [
            self._instances.close_all(closed[name], "it was removed from the configuration")
            for name in removed
        ] + [
            self._instances.close_all(closed[name], "its configuration changed") for name in changed
        ]
        for call in closing:
            await call
        for name in changed:
            self._instances.publish("server.restarted", name, reason="its configuration changed")
        for slots in closed.values():
            self._interests.carry(slots, "it was removed from the configuration")
        self._instances.warm_up()
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
        stable_after = settings.duration("pool.stableAfter")
        call_max_duration = at_least_a_call(settings.duration("pool.callMaxDuration"))
        self._requests.call_timeout = call_timeout
        self._instances.idle_timeout = idle_timeout
        self._instances.stable_after = stable_after
        self._requests.call_max_duration = call_max_duration

    # The service

    def startService(self) -> None:
        self._instances.stopping = False
        MultiService.startService(self)
        self._instances.warm_up()

    def stopService(self) -> Deferred[None]:
        """Close every instance; fires once every child process has been reaped."""
        self._interests.stop()
        self._requests.deadlines.stop()
        waits: list[Deferred[Any]] = [self._instances.stop()]
        stopped = MultiService.stopService(self)
        if isinstance(stopped, Deferred):
            waits.append(stopped)
        done: Deferred[Any] = gatherResults(waits, consumeErrors=True)

        def logged(failure: Failure) -> None:
            self.log.failure("stopping the pool", failure)

        return done.addCallbacks(lambda _: None, logged)
