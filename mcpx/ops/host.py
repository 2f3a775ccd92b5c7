# -*- test-case-name: tests.daemon.test_ops -*-
"""
What the operations run against, and the shape of one request for one.

L{OpHost} is the daemon's parts as a handler sees them; the warm pool in it is a
L{mcpx.pool.interface.PoolInterface}.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from attrs import Factory, frozen
from twisted.internet.interfaces import IReactorTime

from mcpx.ops.clashes import Clashes
from mcpx.ops.errors import OpError
from mcpx.ops.recent_calls import RecentCalls
from mcpx.ops.reloading import ReloadHost, Reloads
from mcpx.pool.interface import PoolInterface
from mcpx.questions.broker import Broker
from mcpx.questions.caller import Caller
from mcpx.settings.resolve import Settings
from mcpx.settings.secrets import SecretMasker
from mcpx.tasks.store import TaskStore

if TYPE_CHECKING:
    from mcpx.auth.signin import SignIns
    from mcpx.scripts.runner import Scripts

#: The caller identity when a request names none (C{Mcpx-Client} header).
DEFAULT_CLIENT = "cli"


class OpHost(ReloadHost, Protocol):
    """
    What an operation runs against: a read-only view over the daemon's parts
    (L{mcpx.daemon.parts.OpsHost}).  A reload changes the settings and servers by
    L{reconfigure}, which puts a new record of parts in place in one step: it is the
    L{ReloadHost} its C{reloads} run against.

    @ivar pool: the warm pool, or C{None} while the daemon runs without one.
    @ivar settings: the resolved settings, or C{None} when none were given.
    @ivar reloads: runs reloads one at a time (L{mcpx.ops.reloading}).
    @ivar broker: the questions upstream servers asked, or C{None} while the daemon runs
        without a broker.
    @ivar masker: hides the configured credentials in what the operations answer.
    @ivar clashes: the names pass-through servers both offer (L{mcpx.ops.clashes}).
    @ivar calls: the last tool calls that reached a server (C{GET /v1/calls}).
    """

    @property
    def pid(self) -> int: ...
    @property
    def started_at(self) -> float: ...
    @property
    def clock(self) -> IReactorTime: ...
    @property
    def pool(self) -> PoolInterface | None: ...
    @property
    def state_dir(self) -> str: ...
    @property
    def tasks(self) -> TaskStore: ...
    @property
    def reloads(self) -> Reloads: ...
    @property
    def broker(self) -> Broker | None: ...
    @property
    def masker(self) -> SecretMasker: ...
    @property
    def scripts(self) -> Scripts | None: ...
    @property
    def sign_ins(self) -> SignIns | None: ...
    @property
    def clashes(self) -> Clashes: ...
    @property
    def calls(self) -> RecentCalls: ...


@frozen
class Invocation:
    """
    One request for an operation.

    @ivar args: the input, already checked against the op's input schema.
    @ivar client: who is asking; the scope key of a C{scope: client} server.
    @ivar on_progress: where progress goes when the caller asked to see it.
    @ivar caller: the host request an MCP gateway tool runs for, so the questions its
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
    caller: Caller | None = None
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


def settings_of(host: OpHost) -> Settings:
    """The host's settings; C{503 settings_unavailable} when it was given none."""
    return required(
        host.settings,
        "settings_unavailable",
        "this daemon was started without its settings; `mcpx settings --json` shows them",
    )
