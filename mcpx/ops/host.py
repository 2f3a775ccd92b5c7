# -*- test-case-name: tests.daemon.test_ops -*-
"""
What the operations run against, and the shape of one request for one.

L{OpHost} is the daemon's parts, as one record; the warm pool in it is a
L{mcpx.pool.interface.PoolInterface}.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import Factory, define, field, frozen
from twisted.internet.interfaces import IReactorTime

from mcpx.auth.caller import attributed_to, principal_of
from mcpx.call import Call
from mcpx.ops.clashes import Clashes
from mcpx.ops.errors import OpError
from mcpx.ops.events import EventBus
from mcpx.ops.recent_calls import RecentCalls
from mcpx.ops.reloading import Reloads
from mcpx.pool.interface import PoolInterface
from mcpx.questions.broker import Broker
from mcpx.questions.relay import Relay
from mcpx.settings.resolve import Settings
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.servers import ServersConfig
from mcpx.tasks.store import TaskStore
from mcpx.tasks.task import Task

if TYPE_CHECKING:
    from mcpx.auth.host_signin import HostSignIns
    from mcpx.auth.signin import SignIns
    from mcpx.scripts.runner import Scripts

#: The caller identity when a request names none (C{Mcpx-Client} header).
DEFAULT_CLIENT = "cli"


def task_events(events: EventBus) -> Callable[[Task], None]:
    """What tells C{events} of each task made and each change of its state (C{task.*})."""

    def changed(task: Task) -> None:
        kind = "task.created" if task.changes == 1 else f"task.{task.status.value}"
        shown = task.summary()
        shown.pop("server", None)
        events.publish(kind, task.server, **attributed_to(principal_of(task.client or "")), **shown)

    return changed


def _task_store(host: OpHost) -> TaskStore:
    """The tasks of a host given none: in memory, their events told to its bus."""
    return TaskStore(
        host.clock,
        ttl=host.settings.duration("proto.askTTL"),
        per_client=host.settings.integer("tasks.maxPerClient"),
        on_change=[task_events(host.events)],
    )


@define(eq=False)
class OpHost:
    """
    What the operations run against: the daemon's parts below its MCP server and HTTP
    app, as one record (L{mcpx.daemon.service.make_service} builds each part with the
    parts below it and passes them in).  A part that is C{None} is one this daemon runs
    without; the ops that need it answer C{503} (L{required}).

    A reload changes the settings and servers together, in one step (L{reconfigure}):
    this is the L{ReloadHost} its C{reloads} run against.

    @ivar clock: the reactor's clock: uptime, keep-alives, task expiry.
    @ivar settings: the resolved settings (C{/v1/settings}, C{/v1/protocol}, limits).
    @ivar servers: the configured servers; a reload puts new ones in place.
    @ivar state_dir: the state directory, shown by C{/v1/settings}.
    @ivar masker: hides the configured credentials in error answers; the pool and the
        event bus share it.
    @ivar events: the event bus; the pool is given its C{publish}.
    @ivar reloads: runs C{POST /v1/reload} and C{SIGHUP} one at a time, reading the
        config file afresh; remembers the last outcome for C{/health}.
    @ivar tasks: calls made with C{"task": true}, kept C{proto.askTTL} after they
        finish; each change of one is a C{task.*} event (L{task_events}).
    @ivar broker: the questions upstream servers asked (C{/v1/questions}).  The daemon
        starts and stops it.
    @ivar relay: puts those questions to the calling clients or leaves them with the broker.
    @ivar pool: the warm pool, behind the policy (L{mcpx.policy.guard.GuardedPool}).
    @ivar scripts: runs C{mcpx_exec} programs (C{/v1/exec}).
    @ivar sign_ins: the OAuth sign-ins to remote servers (C{/v1/auth}).
    @ivar host_sign_ins: the sign-ins offered to hosts through URL elicitation
        (L{mcpx.auth.host_signin}).
    @ivar clashes: the names pass-through servers both offer (L{mcpx.ops.clashes}).
    @ivar calls: the last tool calls that reached a server (C{/v1/calls}, the status
        page); the pool is given its C{call_finished}.
    @ivar pid: the daemon's process id, reported by C{/health}; set again when the
        daemon starts, after C{twistd} has forked.
    @ivar started_at: when the daemon's parts were made (its uptime, in C{/health}).
    """

    clock: IReactorTime
    settings: Settings
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
    clashes: Clashes = Factory(Clashes)
    calls: RecentCalls = field(
        default=Factory(lambda self: RecentCalls(self.clock), takes_self=True)
    )
    pid: int = Factory(os.getpid)
    started_at: float = field(
        default=Factory(lambda self: self.clock.seconds(), takes_self=True), init=False
    )

    def reconfigure(self, settings: Settings, servers: ServersConfig) -> None:
        """What a reload applies: these settings and servers, together."""
        self.settings, self.servers = settings, servers

    def close(self) -> None:
        """End every event stream and forget every task: the daemon is stopping."""
        self.events.close()
        self.tasks.close()


@frozen
class Invocation:
    """
    One request for an operation.

    @ivar args: the input, already checked against the op's input schema.
    @ivar client: who is asking; the scope key of a C{scope: client} server.
    @ivar on_progress: where progress goes when the caller asked to see it.
    @ivar call: the host request's call an MCP gateway tool runs for, so the questions its
        upstream calls cause can reach that host (C{mcpx_exec}).
    @ivar owner: whose the artifacts it makes are, when not C{client}'s (an MCP
        2026-07-28 request's client is a scope of that request alone).
    @ivar run: the C{mcpx_exec} run a CPython-mode program's call claims to be made
        for (C{X-Mcpx-Run} and C{X-Mcpx-Run-Key}), as (run id, key).
    @ivar holder: the caller identity of the access token's subject the request came
        with (C{daemon.auth} C{oauth}), or C{None}: when set, the caller sees and
        answers only that subject's tasks and questions (L{holds}).
    @ivar meta: what the upstream request carries in its C{_meta} (an MCP host's trace
        context and log level, for C{mcpx_call}), or C{None}.
    """

    args: Mapping[str, Any]
    client: str = DEFAULT_CLIENT
    on_progress: Callable[[dict[str, Any]], None] | None = None
    call: Call | None = None
    owner: str | None = None
    run: tuple[str, str] | None = None
    holder: str | None = None
    meta: Mapping[str, Any] | None = None

    @property
    def by_owner(self) -> bool:
        """
        Whether the daemon's owner asks: a request that came without an access token's
        subject (the unix sockets, and every caller of a daemon without C{oauth}).
        """
        return self.holder is None

    def holds(self, client: str | None) -> bool:
        """
        Whether what was left for C{client} is this caller's to see: always without an
        access token (the owner's socket, a daemon without tokens); with one, when it is
        the subject's own identity or a session or request scope under it.
        """
        if self.holder is None:
            return True
        return client is not None and (
            client == self.holder or client.startswith(f"{self.holder}/")
        )


@frozen
class Reply:
    """An answer with a status (or headers) other than a plain C{200}."""

    body: Any
    status: int = 200
    headers: Mapping[str, str] = Factory(dict)


@frozen
class EventFeed:
    """
    The answer of the events operation: which events to stream, and how often to ping.

    @ivar resources: for a stream that watches resources (C{?uri=}), the (server,
        upstream URI) pairs it subscribed to; C{None} otherwise.
    @ivar watching: the data of its first event: what was subscribed, what was not.
    @ivar release: gives the subscriptions back; called once the stream ends.
    """

    servers: tuple[str, ...]
    kinds: tuple[str, ...]
    keep_alive: float
    resources: tuple[tuple[str, str], ...] | None = None
    watching: Mapping[str, Any] | None = None
    release: Callable[[], None] | None = None


_Part = TypeVar("_Part")


def required(part: _Part | None, code: str, message: str) -> _Part:
    """
    A part of the host an op cannot do without.

    @raise OpError: C{503 code}, saying C{message}, while the daemon runs without it.
    """
    if part is None:
        raise OpError(503, code, message)
    return part


def pool_of(host: OpHost) -> PoolInterface:
    """The host's pool; C{503 pool_unavailable} while the daemon runs without one."""
    return required(
        host.pool,
        "pool_unavailable",
        "this daemon is running without its server pool, so it cannot reach servers; "
        "restart it with `mcpx daemon`",
    )
