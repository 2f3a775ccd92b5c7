# -*- test-case-name: tests.daemon.test_reloading -*-
"""
Reloading the config file (C{POST /v1/reload}, C{SIGHUP}).

One reload runs at a time: a second waits for the first, so the servers
C{/v1/settings} shows, the pool's and the MCP server's are always those of the same
file.  A reload:

  1. reads the file the daemon started with (L{mcpx.settings.config.reread_config}); a
     file that is missing, unreadable or invalid refuses the reload, and the running
     configuration stays as it was;
  2. applies the settings that can change while the daemon runs (L{LIVE_SETTINGS}) and
     names the others the file changed, which take effect at the next start;
  3. hands the servers to the pool, and tells the MCP server which servers changed, so
     every connected host that can hear of it is told its lists changed.

Each outcome is published on C{/v1/events} (C{config.reloaded}, C{config.reload_failed})
and the last one is kept for C{/health} (C{mcpx status}).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

from attrs import define, field, frozen
from twisted.internet.defer import Deferred, DeferredLock, ensureDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mcpx.ops.events import EventBus
from mcpx.ops.reload_summary import reload_summary
from mcpx.pool.status import ReloadReport
from mcpx.settings.config import ConfigFile
from mcpx.settings.errors import SettingsError
from mcpx.settings.resolve import Settings
from mcpx.settings.servers import ServersConfig, passthrough_twice

log = Logger()

#: The settings a reload applies at once; every other one changed waits for a restart.
LIVE_SETTINGS: Final = (
    "pool.callTimeout",
    "pool.callMaxDuration",
    "pool.idleTimeout",
    "pool.stableAfter",
)


class ReloadRefused(Exception):
    """The config file could not be used; nothing was changed."""


class ReloadHost(Protocol):
    """What a reload changes (L{mcpx.ops.host.OpHost})."""

    @property
    def settings(self) -> Settings: ...
    @property
    def servers(self) -> ServersConfig | None: ...
    @property
    def events(self) -> EventBus: ...

    def reconfigure(self, settings: Settings, servers: ServersConfig) -> None:
        """Put the daemon's parts with these settings and servers in place, in one step."""
        ...


class Retunable(Protocol):
    """A pool whose live settings can change (L{mcpx.pool.pool.Pool.retune})."""

    def retune(self, settings: Settings) -> None: ...


@frozen
class ReloadOutcome:
    """What the last reload did: C{error} is C{None} when it was applied."""

    at: float
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "ok": self.error is None, "error": self.error}


#: Told which servers a reload changed (removed, added or configured differently).
ChangeListener = Callable[[ReloadReport], object]


def server_changes(old: ServersConfig | None, new: ServersConfig) -> ReloadReport:
    """What taking C{new} in place of C{old} does, by server name (as the pool does it)."""
    before = old.servers if old is not None else {}
    after = new.servers
    unchanged = tuple(name for name in after if name in before and before[name] == after[name])
    return ReloadReport(
        removed=tuple(name for name in before if name not in after),
        added=tuple(name for name in after if name not in before),
        changed=tuple(name for name in after if name in before and before[name] != after[name]),
        unchanged=unchanged,
        # A server that runs on as it was may still list or call differently.
        policy_changed=tuple(
            name for name in unchanged if old is not None and old.policy(name) != new.policy(name)
        ),
    )


def changed_settings(old: Settings, new: Settings) -> list[str]:
    """The names of the settings whose values differ, in declaration order."""
    return [
        resolved.setting.name
        for resolved in old
        if new.value(resolved.setting.name) != resolved.value
    ]


@define
class Reloads:
    """
    Runs reloads one at a time, and remembers how the last one ended.

    @ivar read: reads the config file afresh; C{None} when this daemon cannot.
    """

    clock: IReactorTime
    read: Callable[[], ConfigFile] | None = None
    last: ReloadOutcome | None = None
    _listeners: list[ChangeListener] = field(factory=list, init=False)
    _announcers: list[Callable[[], object]] = field(factory=list, init=False)
    _lock: DeferredLock = field(factory=DeferredLock)

    def listen(self, listener: ChangeListener) -> None:
        """Tell C{listener} of each applied reload that changed a server or its policy."""
        self._listeners.append(listener)

    def announce_with(self, announcer: Callable[[], object]) -> None:
        """
        Call C{announcer} after each applied reload made here (not one made because
        another daemon of a fleet changed the configuration: L{run}'s C{announce}).
        """
        self._announcers.append(announcer)

    def run(
        self,
        host: ReloadHost,
        apply_servers: Callable[[ServersConfig], Deferred[ReloadReport]],
        pool: Retunable | None,
        *,
        announce: bool = True,
    ) -> Deferred[dict[str, Any]]:
        """
        Reload once the reloads before it have finished.

        @param apply_servers: hands the new servers to the pool; fires once the
            processes it stopped are gone.
        @param announce: call the announcers (L{announce_with}) once it is applied
            (C{False}: the reload follows another daemon's change, which that daemon
            announced).
        @return: the answer of C{POST /v1/reload}; fails with L{ReloadRefused} when the
            file could not be used.
        """
        return self._lock.run(
            lambda: ensureDeferred(self._reload(host, apply_servers, pool, announce))
        )

    async def _reload(
        self,
        host: ReloadHost,
        apply_servers: Callable[[ServersConfig], Deferred[ReloadReport]],
        pool: Retunable | None,
        announce: bool = True,
    ) -> dict[str, Any]:
        if self.read is None:
            raise ReloadRefused("this daemon cannot re-read its config file; restart it")
        settings = host.settings
        try:
            config = self.read()
            wanted = settings.with_file(config)
            twice = passthrough_twice(config.servers, wanted.strings("mcp.passthrough"))
            if twice is not None:
                raise SettingsError(twice)
        except SettingsError as e:
            self._refused(host, str(e))
            raise ReloadRefused(str(e)) from None
        live: list[str] = []
        later: list[str] = []
        taken = settings
        for name in changed_settings(settings, wanted):
            (live if name in LIVE_SETTINGS else later).append(name)
        if live:
            taken = settings.taking(wanted, tuple(live))
        changes = server_changes(host.servers, config.servers)
        # The parts and the pool change in the same step: nothing can see one without the other.
        host.reconfigure(taken, config.servers)
        if live and pool is not None:
            pool.retune(taken)
        applying = apply_servers(config.servers)
        if changes.removed or changes.added or changes.changed or changes.policy_changed:
            for listener in self._listeners:
                try:
                    listener(changes)
                except Exception:
                    log.failure("telling of a reload failed")
        report = await applying
        answer: dict[str, Any] = report.to_json()
        answer["settings"] = {"applied": live, "restart_needed": later}
        misconfigured = config.servers.misconfigured
        if misconfigured:
            answer["misconfigured"] = misconfigured
        self.last = ReloadOutcome(self.clock.seconds())
        host.events.publish("config.reloaded", None, **answer)
        log.info(
            "configuration reloaded: {summary}",
            summary=reload_summary(answer),
            answer=answer,
        )
        for name, why in misconfigured.items():
            log.warn("server {server} is misconfigured: {why}", server=name, why=why)
        if announce:
            for announcer in self._announcers:
                try:
                    announcer()
                except Exception:
                    log.failure("telling the other daemons of a reload failed")
        for note in config.notes:
            log.info("config file: {note}", note=note)
        if later:
            log.warn(
                "configuration reloaded; these settings take effect at the next start: {names}",
                names=", ".join(later),
            )
        return answer

    def _refused(self, host: ReloadHost, why: str) -> None:
        self.last = ReloadOutcome(self.clock.seconds(), why)
        log.error("configuration reload refused, the running configuration is kept: {why}", why=why)
        host.events.publish("config.reload_failed", None, error=why)
