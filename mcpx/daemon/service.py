# -*- test-case-name: tests.daemon.test_shutdown,tests.daemon.test_process -*-
"""
Assembly of the daemon's service tree: the one function C{twistd mcpx} and
C{mcpx daemon} share.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from attrs import Factory, evolve, field, frozen
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import (
    IReactorCore,
    IReactorFDSet,
    IReactorThreads,
    IReactorTime,
)
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.web.resource import IResource

from mcpx import tracing
from mcpx.auth.host_signin import HostSignIns
from mcpx.auth.signin import SignIns
from mcpx.auth.store import TokenStore, path_in
from mcpx.call import Asker, Call
from mcpx.daemon.bearer import verifier_for
from mcpx.daemon.browser_login import BrowserLogins
from mcpx.daemon.fleet_config import ConfigNotices
from mcpx.daemon.gate import (
    AUTH_NONE,
    Gate,
    HostRule,
    OriginRule,
    Upstreams,
    upstream_door,
)
from mcpx.daemon.http import DaemonHTTP
from mcpx.daemon.lean_path import LeanMcp
from mcpx.daemon.limits import TransportLimits
from mcpx.daemon.listeners import SOCKET_NAME, ListenerService, exposure, unix_endpoint
from mcpx.daemon.metrics import Metrics, RouteTemplates
from mcpx.daemon.parts import UpstreamNotices
from mcpx.daemon.root import DaemonService, FleetService, IDaemonReactor
from mcpx.daemon.sdnotify import Notifier
from mcpx.daemon.site import DaemonSite, SiteOptions
from mcpx.daemon.token import TokenFile
from mcpx.ops.auth import restart_after_sign_in
from mcpx.ops.errors import error_from
from mcpx.ops.events import EventBus
from mcpx.ops.host import OpHost, task_events
from mcpx.ops.recent_calls import RecentCalls
from mcpx.ops.reloading import ReloadRefused, Reloads
from mcpx.ops.shutdown import Shutdown
from mcpx.ops.table import OPS
from mcpx.policy.guard import Confirmation, GuardedPool, said_yes
from mcpx.policy.sampling import SamplingGuard
from mcpx.pool.pool import Pool
from mcpx.questions.broker import Broker
from mcpx.questions.relay import WATCHED_WITHIN, Relay
from mcpx.questions.store import QuestionStore
from mcpx.scripts.artifacts import ARTIFACTS_DIRECTORY, Artifacts
from mcpx.scripts.cpython import EXEC_DIRECTORY
from mcpx.scripts.runner import Scripts, limits_from
from mcpx.server.dispatch import McpServer
from mcpx.server.http import McpHTTP
from mcpx.server.mcp_socket import StdioFactory, stdio_endpoint
from mcpx.server.request_state import state_keys
from mcpx.settings.config import reread_config
from mcpx.settings.errors import SettingsError
from mcpx.settings.oauth_resource import OAUTH, OAuthResource
from mcpx.settings.resolve import Settings
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.server_policy import ServerPolicy
from mcpx.settings.servers import ServersConfig
from mcpx.spec.questions import ELICIT
from mcpx.spec.revision import NEWEST
from mcpx.store.config import StoreTarget, open_records
from mcpx.store.heartbeat import Heartbeat, alive_in, new_daemon_id
from mcpx.tasks.journal import journal_for
from mcpx.tasks.store import TaskStore
from mcpx.upstream.connect import make_connector
from mcpx.upstream.endpoints import IReactorHTTP
from mcpx.upstream.first_use import ClientOnFirstUse
from mcpx.upstream.groups import RECORDS_DIRECTORY, ProcessGroups
from mcpx.upstream.handlers import UpstreamHandlers, declared_in
from mcpx.wire.errors import RpcError
from mcpx.wire.twisted_private import loop_without_idle_calls, poll_with_lazy_log_prefix

if TYPE_CHECKING:
    from treq.client import HTTPClient

_log = Logger()


@frozen
class DaemonConfig:
    """
    What the service tree is built from.

    @ivar state_dir: the private directory holding the socket and durable state.
    @ivar listen: endpoint strings besides the unix socket.
    @ivar settings: the resolved settings.
    @ivar servers: the configured upstream servers.
    @ivar environ: the daemon's environment, which stdio upstreams inherit.
    @ivar notifier: tells systemd when the daemon is ready and stopping, when it
        runs as a C{Type=notify} service (L{mcpx.daemon.sdnotify}).
    @ivar masker: hides the servers' credentials wherever text leaves the daemon: the
        pool, the event bus, the API's errors and the log share it.
    """

    state_dir: Path
    listen: tuple[str, ...]
    settings: Settings
    servers: ServersConfig
    environ: Mapping[str, str] = field(factory=dict)
    masker: SecretMasker = field(
        default=Factory(lambda self: SecretMasker(self.servers), takes_self=True)
    )
    notifier: Notifier | None = field(default=None, eq=False)
    #: The PostgreSQL database C{store.url} names; C{None} keeps records in SQLite.
    store: StoreTarget | None = field(default=None, eq=False)

    def __attrs_post_init__(self) -> None:
        if self.store is not None and self.store.password is not None:
            self.masker.add_values([self.store.password])

    def endpoints(self) -> tuple[str, ...]:
        """Every endpoint the daemon listens on, the unix socket first."""
        return (unix_endpoint(self.state_dir), *self.listen)

    def exposed_endpoints(self) -> tuple[str, ...]:
        return tuple(d for d in self.listen if exposure(d).beyond_loopback)

    @property
    def auth(self) -> str:
        """
        C{daemon.auth}: who may use the TCP listeners without the token; C{oauth} for
        the object form (L{oauth}).
        """
        value = self.settings.value("daemon.auth")
        return OAUTH if isinstance(value, OAuthResource) else str(value)

    @property
    def oauth(self) -> OAuthResource | None:
        """The object form of C{daemon.auth}, when it is set."""
        value = self.settings.value("daemon.auth")
        return value if isinstance(value, OAuthResource) else None


def prepare_state_dir(state_dir: Path) -> None:
    """
    Create the state directory, readable by its owner only.

    Runs once at start-up, before the reactor serves anyone.
    """
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(state_dir, 0o700)


#: The broker's durable store, in the state directory.
QUESTIONS_FILE = "questions.sqlite3"


def make_service(config: DaemonConfig, reactor: IDaemonReactor) -> DaemonService:
    """
    Build the daemon's service tree, its parts bottom-up, each given the parts below it
    when it is made (L{mcpx.daemon.parts}).

    @param reactor: provides C{IReactorTime}, process spawning and the listening
        interfaces; taken as a parameter so tests build the tree on a memory reactor.
    """
    clock: IReactorTime = reactor
    core: IReactorCore = reactor
    settings, servers = config.settings, config.servers
    # First: the parts made below look once whether to make spans (mcpx.tracing).
    start_tracing(settings)
    # Each ready descriptor handled without a log context made for it (the same log).
    poll_with_lazy_log_prefix(reactor)
    # Its loop's iterations with nothing timed due read the clock once, and call no more.
    loop_without_idle_calls(reactor)
    events = EventBus(clock, masker=config.masker)
    metrics = Metrics(
        RouteTemplates(
            (op.path for op in OPS), exact=("/", "/status.js", "/status.css", "/mcp", "/metrics")
        ),
        max_tools=settings.integer("daemon.metricsMaxTools"),
    )
    publish = metrics.published(events.publish)
    calls = RecentCalls(clock, publish=events.publish, unheard=events.unheard)
    notices = UpstreamNotices()

    # This run's id: in the shared store's heartbeats, and at the start of every
    # Mcp-Session-Id this daemon mints (so a balancer can keep a session on it).
    daemon_id = new_daemon_id()
    records = open_records(
        config.store,
        threads=settings.integer("store.threads"),
        sqlite_path=str(config.state_dir / QUESTIONS_FILE),
        reactor=reactor,
    )
    # Tasks are written to a store only when it is shared (store.url); else the SQLite
    # file holds the questions, and tasks stay in memory and the journal.
    shared = records if config.store is not None else None
    tasks = TaskStore(
        clock,
        ttl=settings.duration("proto.askTTL"),
        per_client=settings.integer("tasks.maxPerClient"),
        on_change=[task_events(events)],
        records=shared,
        daemon=None if shared is None else daemon_id,
        # To say in a cancel through this daemon whether the task's own daemon is alive.
        alive=None if shared is None else partial(alive_in, shared, clock),
    )
    # A daemon sharing its store beats in it, under an id of its own for this run; after
    # each beat, the running tasks of daemons that stopped beating are failed.
    heartbeat = (
        None if shared is None else Heartbeat(clock, shared, daemon_id, watchers=[tasks.fail_lost])
    )
    if config.store is not None:
        _log.info("questions and tasks are kept in {store}", store=config.store.description)
    broker = Broker(
        clock,
        store=QuestionStore(records=records),
        heartbeat=heartbeat,
        publish=publish,
        ttl=settings.duration("proto.brokerTimeout"),
        keep=settings.duration("proto.askTTL"),
    )
    sign_ins = _sign_ins(reactor, clock, config)
    groups = ProcessGroups(config.state_dir / RECORDS_DIRECTORY)
    connector = make_connector(
        reactor,
        config.environ,
        config.state_dir,
        max_message_size=settings.integer("transport.maxMessageSize"),
        http_connections=settings.integer("transport.httpConnections"),
        probe_timeout=settings.duration("pool.probeTimeout"),
        open_timeout=settings.duration("pool.startTimeout"),
        lenient=not settings.policy().strict(NEWEST),
        max_rounds=settings.integer("proto.askRounds"),
        groups=groups,
        credentials=sign_ins.credentials_for,
    )

    def handlers(server: str, scope_key: str) -> UpstreamHandlers:
        # The relay and the sampling guard, made next over the pool, are read here when
        # an instance opens: after make_service has returned.
        return _upstream_handlers(relay, sampling, notices, server, scope_key)

    pool = Pool(
        servers=servers,
        connector=connector,
        clock=clock,
        call_timeout=settings.duration("pool.callTimeout"),
        idle_timeout=settings.duration("pool.idleTimeout"),
        max_client_instances=settings.integer("pool.maxClientInstances"),
        stable_after=settings.duration("pool.stableAfter"),
        max_asking_instances=settings.integer("pool.maxAskingInstances"),
        cancel_grace=settings.duration("pool.cancelGrace"),
        call_max_duration=settings.duration("pool.callMaxDuration"),
        publish=publish,
        handlers=handlers,
        masker=config.masker,
        on_call=_call_finished(metrics, calls),
    )

    def roots_source(server: str, scope_key: str) -> Asker | None:
        return mcp.roots_source(server, scope_key)

    # The pool tells the relay whose each question is, and pauses its deadlines while
    # one waits; the MCP server, made over the host, is the source of the roots no one
    # call asks for (read when an upstream asks, after make_service has returned).
    relay = Relay(
        broker,
        clock,
        owner=pool.owner,
        hold=pool.hold_deadlines,
        candidates=pool.calls,
        lone=pool.lone_request,
        roots_source=roots_source,
        native=settings.boolean("proto.native"),
        client_wait=settings.duration("proto.askTimeout"),
        roots=settings.strings("proto.roots"),
        # On a shared store another daemon of the fleet may be the one watched (its
        # status page, its mcpx elicit), which this one cannot see: it waits.
        watched=(
            partial(_broker_watched, events, broker)
            if settings.string("proto.brokerWhenUnwatched") == "refuse"
            and not settings.string("store.url")
            else None
        ),
    )
    # Each server's policy, read from the pool's servers of the moment (a reload's).
    sampling = SamplingGuard(partial(_policy, pool), partial(_ask_user, relay), events.publish)
    # Every entry point reaches the pool through the policy (mcpx.policy).
    guarded = GuardedPool(
        pool,
        confirm=partial(_confirm_call, pool, relay),
        publish=events.publish,
        **_compiling_off_reactor(reactor),
    )
    scripts = Scripts(
        reactor,
        clock,
        partial(_same, guarded),
        limits_from(settings),
        Artifacts(
            config.state_dir / ARTIFACTS_DIRECTORY,
            clock,
            settings.duration("exec.artifactRetention"),
        ),
        max_line=settings.integer("transport.maxMessageSize"),
        socket=str(config.state_dir / SOCKET_NAME),
        scratch=config.state_dir / EXEC_DIRECTORY,
        explain=lambda error: error_from(error).message,
    )
    reloads = Reloads(clock, read=partial(reread_config, servers.path, config.environ))
    host = OpHost(
        clock=clock,
        settings=settings,
        servers=servers,
        state_dir=str(config.state_dir),
        masker=config.masker,
        events=events,
        reloads=reloads,
        tasks=tasks,
        broker=broker,
        relay=relay,
        pool=guarded,
        scripts=scripts,
        sign_ins=sign_ins,
        host_sign_ins=HostSignIns(
            sign_ins,
            reactor,
            clock,
            on_signed_in=partial(restart_after_sign_in, guarded),
        ),
        calls=calls,
        pid=os.getpid(),
    )
    # One MCP server behind both transports: /mcp on the site, mcpx serve's socket.
    mcp = McpServer(
        host,
        clock,
        passthrough=settings.strings("mcp.passthrough"),
        # A shared store keeps each requestState's round, so any daemon honours it once
        # and a retry for a call held here reaches it through the store.
        rounds_in=None if shared is None else (shared, daemon_id),
        reloads=reloads,
        upstream_notices=notices.listen,
        state_keys=state_keys(settings, clock.seconds()),
    )
    mcp_http = McpHTTP(
        mcp,
        clock,
        keep_alive=settings.duration("transport.sseKeepAlive"),
        max_body=settings.integer("transport.maxMessageSize"),
        max_sessions_per_client=settings.integer("transport.maxSessionsPerClient"),
        daemon=daemon_id,
    )
    fleet: FleetService | None = None
    if shared is not None:
        # A reload made here is told to the fleet's other daemons, and theirs reach here.
        config_notices = ConfigNotices(
            shared,
            daemon_id,
            clock,
            servers.path,
            partial(_reload_heard, reloads, host, guarded),
            reloads=reloads,
        )
        fleet = FleetService(
            # A cancel through another daemon stops the task here; a task another daemon
            # runs wakes the tasks/result waiting on it here.
            starts=[tasks.listen, config_notices.start],
            stops=[config_notices.stop, mcp.asking.rounds.stop],
        )
    http = DaemonHTTP(host, mcp_http, metrics=metrics, logins=BrowserLogins(clock))

    shutdown = Shutdown(clock, kill=[groups.kill_all])
    front = gate(
        http.resource(),
        config,
        clock,
        shutdown,
        reactor=reactor,
        upstreams=groups,
        logins=http.logins,
    )
    site = DaemonSite(
        front,
        reactor,
        SiteOptions(
            TransportLimits.from_settings(settings),
            metrics,
            shutdown,
            lean=LeanMcp(front, mcp_http),
            opened=front.connection_made,
        ),
    )
    for description in config.exposed_endpoints():
        _log.warn(
            "listening on {endpoint} beyond loopback (daemon.auth {auth})",
            endpoint=description,
            auth=config.auth,
        )
    stdio = StdioFactory(
        mcp,
        clock,
        drain=settings.duration("transport.stdioDrain"),
        max_length=settings.integer("transport.maxMessageSize"),
        shutdown=shutdown,
        refuse=upstream_door(groups),
        # A memory reactor's (in tests) has no descriptors: its bridges copy.
        pipes_reactor=IReactorFDSet(reactor, None),
    )
    listeners = [
        *(ListenerService(core, description, site) for description in config.endpoints()),
        ListenerService(core, stdio_endpoint(config.state_dir), stdio, descriptors=True),
    ]
    return DaemonService(
        http,
        listeners,
        pool,
        broker,
        groups,
        scripts=scripts,
        shutdown=shutdown,
        journal=journal_for(config.state_dir, clock),
        notifier=config.notifier,
        clock=clock,
        config_notes=servers.notes
        + tuple(
            f"server {name} cannot start: {why}" for name, why in servers.misconfigured.items()
        ),
        fleet=fleet,
    )


def _reload_heard(reloads: Reloads, host: OpHost, pool: GuardedPool) -> Deferred[Any]:
    """Reload here: another daemon of the fleet changed the configuration."""
    running = reloads.run(
        host,
        lambda servers: Deferred.fromCoroutine(pool.reload(servers)),
        pool,
        announce=False,
    )
    # A refused reload is logged and published by Reloads itself.
    return running.addErrback(lambda failure: failure.trap(ReloadRefused) and None)


def start_tracing(settings: Settings) -> None:
    """
    Start OpenTelemetry tracing when C{trace.endpoint} is set (L{mcpx.tracing}).

    @raise SettingsError: when it is not an C{http(s)} URL, or OpenTelemetry is missing.
    """
    endpoint = settings.string("trace.endpoint")
    if not endpoint or tracing.on():
        return
    if not endpoint.startswith(("http://", "https://")):
        raise SettingsError(
            f"trace.endpoint must be an OTLP/HTTP URL (http:// or https://), not {endpoint!r}"
        )
    try:
        tracing.start(endpoint=endpoint, service_name=settings.string("trace.serviceName"))
    except ImportError as e:
        raise SettingsError(
            f"trace.endpoint is set, but OpenTelemetry cannot be loaded ({e}): install mcpx[trace]"
        ) from None
    _log.info("tracing: spans go to {endpoint}", endpoint=endpoint)


def _broker_watched(events: EventBus, broker: Broker, server: str, owner: str | None) -> bool:
    """
    Whether anyone watches the broker for C{server}'s questions now: a C{/v1/events}
    stream (the status page, C{mcpx events}) that would be shown its C{question.asked}
    (asked for C{owner}'s call: the owner's streams and that subject's own), or a
    C{GET /v1/questions} (C{mcpx elicit}, a call's watch) in the last L{WATCHED_WITHIN}
    seconds.
    """
    return events.watching("question.asked", server, owner) or broker.looked_within(WATCHED_WITHIN)


def _call_finished(
    metrics: Metrics, calls: RecentCalls
) -> Callable[[str, str, float, str, str | None], None]:
    """
    The pool's C{on_call}: a tool call that reached a server ended, counted and kept
    among the recent calls.  A function of its own over the two bound methods, not a
    C{partial} with keywords, which made and merged a dict of them on every call.
    """
    counted = metrics.call_finished
    kept = calls.call_finished

    def finished(
        server: str, tool: str, seconds: float, outcome: str, principal: str | None
    ) -> None:
        counted(server, tool, seconds, outcome)
        kept(server, tool, seconds, outcome, principal)

    return finished


def _policy(pool: Pool, server: str) -> ServerPolicy:
    """C{server}'s policy in the pool's servers of the moment."""
    return pool.servers.policy(server)


def _same(part: GuardedPool) -> GuardedPool:
    return part


async def _ask_user(
    relay: Relay, server: str, scope_key: str, call: Call | None, params: Mapping[str, Any]
) -> bool:
    """Put a yes-or-no question to the user behind C{call}, or to the broker."""
    try:
        answer = await relay.ask(server, scope_key, ELICIT, params, call=call, own=True)
    except (RpcError, CancelledError):
        return False
    return said_yes(answer)


async def _confirm_call(pool: Pool, relay: Relay, confirmation: Confirmation) -> bool:
    """A call its policy wants confirmed: asked as an elicitation."""
    scope_key = pool.scope_key(confirmation.server, confirmation.client)
    return await _ask_user(
        relay, confirmation.server, scope_key, confirmation.call, confirmation.question()
    )


def _upstream_handlers(
    relay: Relay,
    sampling: SamplingGuard,
    notices: UpstreamNotices,
    server: str,
    scope_key: str,
) -> UpstreamHandlers:
    """
    The handlers of the instance serving (C{server}, C{scope_key}), declaring no more
    upstream than the questions its key names (L{declared_in}: a pass-through host's).
    """
    # Resource updates, and tool list changes of pass-through servers.
    heard = notices.sink(server)
    handlers = sampling.guarded(server, scope_key, relay.handlers(server, scope_key, heard))
    return evolve(handlers, declares=declared_in(scope_key)[1])


def _compiling_off_reactor(reactor: object) -> dict[str, Any]:
    """The reactor's thread pool as a GuardedPool's compile_in (none on a memory reactor)."""
    if not IReactorThreads.providedBy(reactor):
        return {}
    return {"compile_in": partial(deferToThreadPool, reactor, reactor.getThreadPool())}


def _sign_in_client(reactor: IReactorHTTP) -> HTTPClient:
    """The sign-ins' HTTP client, made at the first sign-in or refresh."""
    # Deferred for start-up memory: the HTTP client machinery (twisted.web.client with
    # it), which a daemon of stdio servers and no sign-in never uses.
    from mcpx.upstream.http_client import owned_client

    return owned_client(reactor, 10.0, keep=2)[0]


def _sign_ins(reactor: IReactorHTTP, clock: IReactorTime, config: DaemonConfig) -> SignIns:
    """
    The OAuth sign-ins, on an HTTP client of their own (made at the first sign-in or
    refresh), tokens in the state directory.
    """

    settings = config.settings
    return SignIns(
        ClientOnFirstUse(partial(_sign_in_client, reactor)),
        clock,
        TokenStore(path_in(config.state_dir)),
        config.masker,
        max_pending=settings.integer("daemon.pendingSignIns"),
    )


def gate(
    resource: IResource,
    config: DaemonConfig,
    clock: IReactorTime,
    shutdown: Shutdown | None = None,
    *,
    reactor: IReactorHTTP | None = None,
    upstreams: Upstreams | None = None,
    logins: BrowserLogins | None = None,
) -> Gate:
    """
    The trust boundary in front of every route (L{mcpx.daemon.gate}), refusing the
    processes of C{upstreams}.
    """
    settings = config.settings
    auth: str | OAuthResource = config.oauth or config.auth
    verifier = None
    if isinstance(auth, OAuthResource):
        # Without a reactor (a gate built alone, in tests) the clock stands in for one.
        fetching = cast(IReactorHTTP, clock) if reactor is None else reactor
        verifier = verifier_for(auth, fetching, clock)
    return Gate(
        resource,
        origins=OriginRule(settings.strings("transport.allowedOrigins")),
        hosts=HostRule(settings.strings("transport.allowedHosts")),
        auth=auth,
        token=None if auth == AUTH_NONE else TokenFile(config.state_dir, clock.seconds),
        verifier=verifier,
        logins=logins,
        shutdown=shutdown,
        upstreams=upstreams,
    )
