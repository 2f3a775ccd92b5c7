# -*- test-case-name: tests.pool.test_pool -*-
"""
What the pool reports about itself: a server's status, and what a reload did.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from attrs import field, frozen

from mcpx.pool.instance import Instance, Slot, is_mirrored
from mcpx.settings.servers import Server, StdioServer


class ServerState(enum.Enum):
    """Where a configured server is, taken over all of its instances."""

    #: Configured, nothing running (never used, reaped, or restarted).
    CONFIGURED = "configured"
    #: An instance is starting and none is ready.
    STARTING = "starting"
    #: At least one instance is ready.
    READY = "ready"
    #: It crashed or failed to start, and its next start is delayed.
    FAILED = "failed"
    #: It cannot start as configured (its entry names a variable the daemon lacks).
    MISCONFIGURED = "misconfigured"


@frozen
class ServerStatus:
    """
    One configured server as the pool sees it.

    @ivar transport: C{"stdio"} or C{"http"}.
    @ivar scope: C{"shared"} (one instance) or C{"client"} (one per caller).
    @ivar instances: how many instances are running or starting.
    @ivar in_flight: upstream requests in flight, over every instance.
    @ivar era: the era of a ready instance (C{"modern"}, C{"legacy"}, C{"http+sse"}).
    @ivar revision: the revision a ready instance agreed.
    @ivar last_error: the most recent crash or failed start, if any.
    @ivar retry_in: seconds until it may be started again, while L{ServerState.FAILED}.
    @ivar failing_scopes: the scope keys whose instance crashed or failed to start and
        has no usable one since (L{mcpx.pool.instance.Slot.failures}): a key not among
        them (one never started, or stable since) starts afresh.
    """

    name: str
    state: ServerState
    transport: str
    scope: str
    instances: int = 0
    in_flight: int = 0
    era: str | None = None
    revision: str | None = None
    last_error: str | None = None
    retry_in: float | None = None
    failing_scopes: frozenset[str] = field(default=frozenset(), eq=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state.value,
            "transport": self.transport,
            "scope": self.scope,
            "instances": self.instances,
            "in_flight": self.in_flight,
            "era": self.era,
            "revision": self.revision,
            "last_error": self.last_error,
            "retry_in": self.retry_in,
        }


@frozen
class ReloadReport:
    """
    What a reload did, by server name.

    @ivar removed: no longer configured; their instances were stopped.
    @ivar added: newly configured; started on first use.
    @ivar changed: configured differently; their instances were stopped, and the next
        use starts them with the new configuration.
    @ivar unchanged: configured the same; their instances were kept warm.
    @ivar policy_changed: among C{unchanged}, those whose policy (L{mcpx.policy}) changed:
        kept warm, but what their hosts may list or call changed.
    """

    removed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    policy_changed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, list[str]]:
        shown = {
            "removed": list(self.removed),
            "added": list(self.added),
            "changed": list(self.changed),
            "unchanged": list(self.unchanged),
        }
        if self.policy_changed:
            shown["policy_changed"] = list(self.policy_changed)
        return shown


def server_status(name: str, config: Server, slots: Mapping[str, Slot], now: float) -> ServerStatus:
    """How C{name}, configured as C{config}, stands at C{now}, taken over its C{slots}."""
    # One pass over the slots: this runs for every pass-through listing (its servers'
    # failing scopes, mcpx.server.catalogues), not for the status page alone.
    instances: list[Instance] = []
    ready: list[Instance] = []
    waits: list[float] = []
    last_error: str | None = None
    failing: list[str] = []
    in_flight = 0
    # A key whose last instance crashed (or never started) and that has not been
    # started since is failed, even once its back-off has passed: the next use
    # starts it, and until then the state says what happened.
    broken = False
    for key, slot in slots.items():
        instance = slot.instance
        usable = False
        if instance is not None:
            instances.append(instance)
            in_flight += instance.in_flight
            usable = instance.usable
            if usable:
                ready.append(instance)
        if slot.failures:
            if instance is None:
                broken = True
            if not usable:
                failing.append(key)
        retry_at = slot.retry_at
        if retry_at is not None and retry_at > now:
            waits.append(retry_at - now)
        if slot.last_error is not None:
            last_error = slot.last_error
    if config.misconfigured is not None:
        state = ServerState.MISCONFIGURED
    elif ready:
        state = ServerState.READY
    elif instances:
        state = ServerState.STARTING
    elif waits or broken:
        state = ServerState.FAILED
    else:
        state = ServerState.CONFIGURED
    era = revision = None
    if ready:
        # The server's own era: a legacy-era instance of a dual-era server (era
        # mirroring) tells it only when nothing else runs.
        first = ready[0] if len(ready) == 1 else min(ready, key=lambda i: is_mirrored(i.scope))
        session = first.session
        assert session is not None
        era = session.era.value
        if session.declaration is not None:
            revision = session.declaration.revision.value
    return ServerStatus(
        name=name,
        state=state,
        transport="stdio" if isinstance(config, StdioServer) else "http",
        scope=config.scope.value,
        instances=len(instances),
        in_flight=in_flight,
        era=era,
        revision=revision,
        last_error=config.misconfigured or last_error,
        retry_in=(min(waits) if waits else 0.0) if state is ServerState.FAILED else None,
        failing_scopes=frozenset(failing),
    )
