# -*- test-case-name: tests.daemon.test_parts -*-
"""
The daemon's parts, as one record, and the ops' host that is a view over it.

L{mcpx.daemon.service.make_service} builds the parts bottom-up: the question store and
the broker, the relay, the pool (given the relay's handlers), the guarded pool, the
scripts, the tasks; then the ops' host over them (L{OpsHost}); then the MCP server over
the host, and the HTTP app over both.  Each part is given the parts below it when it is
made.  Two things go the other way, from the pool's upstream sessions up to parts built
after the pool, and both are done in one place, L{connect_upward}: the relay is told
whose each question is by the pool, and the MCP server hears upstream notifications and
is the source of the roots no single call asks for.

A reload does not edit a part: it makes a new record (C{attrs.evolve}) with the new
settings and servers, and the host takes it in one assignment (L{OpsHost.swap}).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

from attrs import Factory, define, evolve, field, frozen
from twisted.internet.interfaces import IReactorTime

from mcpx.auth.caller import attributed_to, principal_of
from mcpx.ops.clashes import Clashes
from mcpx.ops.events import EventBus
from mcpx.ops.recent_calls import RecentCalls
from mcpx.ops.reloading import Reloads
from mcpx.policy.sampling import SamplingGuard
from mcpx.pool.interface import PoolInterface
from mcpx.questions.broker import Broker
from mcpx.questions.caller import Asker
from mcpx.questions.relay import Attribution, Relay
from mcpx.settings.resolve import Settings
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.server_policy import ServerPolicy
from mcpx.settings.servers import ServersConfig
from mcpx.tasks.store import DEFAULT_TTL, TaskStore
from mcpx.tasks.task import Task
from mcpx.upstream.handlers import NotificationSink

if TYPE_CHECKING:
    from mcpx.auth.host_signin import HostSignIns
    from mcpx.auth.signin import SignIns
    from mcpx.daemon.metrics import Metrics
    from mcpx.scripts.runner import Scripts

__all__ = ["DaemonParts", "OpsHost", "UpstreamNotices", "connect_upward"]

T = TypeVar("T")


def _task_store(parts: DaemonParts) -> TaskStore:
    if parts.settings is None:
        return TaskStore(parts.clock, ttl=DEFAULT_TTL)
    return TaskStore(
        parts.clock,
        ttl=parts.settings.duration("proto.askTTL"),
        per_client=parts.settings.integer("tasks.maxPerClient"),
    )


@frozen
class DaemonParts:
    """
    The daemon's parts below its MCP server and HTTP app.  A part that is C{None} is one
    this daemon runs without (a daemon given no settings serves C{/health} only); the
    ops that need it answer C{503}.

    @ivar clock: the reactor's clock: uptime, keep-alives, task expiry.
    @ivar settings: the resolved settings (C{/v1/settings}, C{/v1/protocol}, limits).
    @ivar servers: the configured servers; a reload makes a record with new ones.
    @ivar state_dir: the state directory, shown by C{/v1/settings}.
    @ivar masker: hides the configured credentials in error answers; the pool and the
        event bus share it.
    @ivar events: the event bus; the pool is given its C{publish}.
    @ivar reloads: runs C{POST /v1/reload} and C{SIGHUP} one at a time, reading the
        config file afresh; remembers the last outcome for C{/health}.
    @ivar tasks: calls made with C{"task": true}, kept C{proto.askTTL} after they finish.
    @ivar broker: the questions upstream servers asked (C{/v1/questions}).  The daemon
        starts and stops it.
    @ivar relay: puts those questions to the calling clients or leaves them with the broker.
    @ivar pool: the warm pool, behind the policy (L{mcpx.policy.guard.GuardedPool}).
    @ivar scripts: runs C{mcpx_exec} programs (C{/v1/exec}).
    @ivar sign_ins: the OAuth sign-ins to remote servers (C{/v1/auth}).
    @ivar host_sign_ins: the sign-ins offered to hosts through URL elicitation
        (L{mcpx.auth.host_signin}).
    @ivar metrics: what C{/metrics} shows.
    @ivar clashes: the names pass-through servers both offer (L{mcpx.ops.clashes}).
    @ivar calls: the last tool calls that reached a server (C{/v1/calls}, the status
        page); the daemon makes it the pool's C{on_call}.
    """

    clock: IReactorTime
    settings: Settings | None = None
    servers: ServersConfig | None = None
    state_dir: str = ""
    masker: SecretMasker = Factory(SecretMasker)
    events: EventBus = field(default=Factory(lambda self: EventBus(self.clock), takes_self=True))
    reloads: Reloads = field(default=Factory(lambda self: Reloads(self.clock), takes_self=True))
    tasks: TaskStore = field(default=Factory(_task_store, takes_self=True))
    broker: Broker | None = None
    relay: Relay | None = None
    pool: PoolInterface | None = None
    scripts: Scripts | None = None
    sign_ins: SignIns | None = None
    host_sign_ins: HostSignIns | None = None
    metrics: Metrics | None = None
    clashes: Clashes = Factory(Clashes)
    calls: RecentCalls = field(
        default=Factory(lambda self: RecentCalls(self.clock), takes_self=True)
    )


class _Part(Generic[T]):
    """
    A read-only attribute of L{OpsHost}: the field of the same name of its current
    L{DaemonParts}, read afresh each time, so a L{OpsHost.swap} shows at once.
    """

    def __set_name__(self, owner: type[OpsHost], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, host: None, owner: type[OpsHost]) -> _Part[T]: ...
    @overload
    def __get__(self, host: OpsHost, owner: type[OpsHost]) -> T: ...
    def __get__(self, host: OpsHost | None, owner: type[OpsHost]) -> T | _Part[T]:
        if host is None:
            return self
        value: T = getattr(host.parts, self._name)
        return value


@define
class OpsHost:
    """
    What the operations run against (L{mcpx.ops.host.OpHost}): a read-only view over
    the daemon's current L{DaemonParts}.

    @ivar parts: the current record; replaced whole by L{swap}, never edited.
    @ivar pid: the daemon's process id, reported by C{/health}; set again when the
        daemon starts, after C{twistd} has forked.
    """

    parts: DaemonParts
    pid: int
    started_at: float = field(init=False)

    def __attrs_post_init__(self) -> None:
        self.started_at = self.parts.clock.seconds()
        self.parts.tasks.on_change.append(self._task_changed)

    def _task_changed(self, task: Task) -> None:
        """Each task made and each change of its state is a C{task.*} event."""
        kind = "task.created" if task.changes == 1 else f"task.{task.status.value}"
        shown = task.summary()
        shown.pop("server", None)
        self.events.publish(
            kind, task.server, **attributed_to(principal_of(task.client or "")), **shown
        )

    def swap(self, parts: DaemonParts) -> None:
        """Take C{parts} in place of the current record, in one step."""
        self.parts = parts

    def reconfigure(self, settings: Settings | None, servers: ServersConfig) -> None:
        """What a reload applies: a record with these settings and servers (L{swap})."""
        self.swap(evolve(self.parts, settings=settings, servers=servers))

    def close(self) -> None:
        """End every event stream and forget every task: the daemon is stopping."""
        self.parts.events.close()
        self.parts.tasks.close()

    # Each a read-only view of the current record's field of the same name.
    clock = _Part["IReactorTime"]()
    pool = _Part["PoolInterface | None"]()
    events = _Part["EventBus"]()
    settings = _Part["Settings | None"]()
    servers = _Part["ServersConfig | None"]()
    state_dir = _Part["str"]()
    tasks = _Part["TaskStore"]()
    reloads = _Part["Reloads"]()
    broker = _Part["Broker | None"]()
    masker = _Part["SecretMasker"]()
    scripts = _Part["Scripts | None"]()
    sign_ins = _Part["SignIns | None"]()
    host_sign_ins = _Part["HostSignIns | None"]()
    clashes = _Part["Clashes"]()
    calls = _Part["RecentCalls"]()


#: Told of each notification an upstream server sends: (server, method, params).
NoticeListener = Callable[[str, str, "Mapping[str, Any] | None"], None]


@define
class UpstreamNotices:
    """
    The upstream notifications the parts above the pool hear (resource updates, the
    tool list changes of pass-through servers).  Made before the pool, whose handlers
    tell it; the MCP server, made after, registers itself (L{connect_upward}).
    """

    _listeners: list[NoticeListener] = field(factory=list)

    def listen(self, listener: NoticeListener) -> None:
        self._listeners.append(listener)

    def sink(self, server: str) -> NotificationSink:
        """What the handlers of one of C{server}'s instances tell."""

        def heard(method: str, params: Mapping[str, Any] | None) -> None:
            for listener in self._listeners:
                listener(server, method, params)

        return heard


class HasServers(Protocol):
    """The pool, as read for a server's policy: its servers change with each reload."""

    @property
    def servers(self) -> ServersConfig: ...


class UpperServer(Protocol):
    """The MCP server, as the parts below it reach it (L{mcpx.server.dispatch.McpServer})."""

    def roots_source(self, server: str, scope_key: str) -> Asker | None: ...
    def upstream_notification(
        self, server: str, method: str, params: Mapping[str, Any] | None
    ) -> None: ...


def _policy(pool: HasServers, server: str) -> ServerPolicy:
    """C{server}'s policy in the pool's servers of the moment."""
    return pool.servers.policy(server)


def connect_upward(
    *,
    relay: Relay | None,
    sampling: SamplingGuard | None,
    pool: Attribution | None,
    servers_of: HasServers | None,
    notices: UpstreamNotices,
    mcp: UpperServer | None,
) -> None:
    """
    The one place a part is given a part built after it, once all are built and
    before the daemon serves anyone:

      - the relay asks the pool whose each question is (L{Relay.attribute_to});
      - the sampling guard reads each server's policy from the pool's servers;
      - the MCP server hears the upstream notifications, and answers for the roots a
        C{roots/list} outside any one call gets.
    """
    if relay is not None and pool is not None:
        relay.attribute_to(pool)
    if sampling is not None and servers_of is not None:
        sampling.follow(partial(_policy, servers_of))
    if mcp is not None:
        notices.listen(mcp.upstream_notification)
        if relay is not None:
            relay.roots_source = mcp.roots_source
