# -*- test-case-name: tests.upstream.test_probe -*-
"""
Finding out which era an upstream server speaks, and remembering the answer.

The 2026-07-28 versioning page makes era a property of the server and tells a
dual-era client to try the modern protocol first.  So mcpx sends
C{server/discover}; a discover result, or an error only a modern server sends
(-32020, -32021, -32022), means modern; anything else — another error, an HTTP
refusal, silence until the probe timeout — means legacy, and mcpx shakes hands with
C{initialize} instead.  Over HTTP, a server that refuses C{initialize} as well with
400, 404 or 405 and no modern error is tried as a 2024-11-05 HTTP+SSE server.

The outcome is kept per server configuration (a hash of the fields that decide
it) in memory and in C{<state>/upstream-eras.json}, so a restart costs no probe.
A remembered era that stops working is probed afresh, once.

A server that ends the connection on the probe (the Python SDK up to 1.8 exits on a
method it does not know: C{mcp-server-sqlite} 2025.4.25 on C{mcp} 1.6) is started
again and spoken to in the legacy era, and that is remembered like any probe's
outcome.  A server entry's C{protocol} pins an era or a revision: no probe is sent, and
nothing is remembered.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from attrs import define, evolve, field, frozen
from twisted.internet.defer import Deferred
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mcpx.settings.servers import RemoteServer, StdioServer
from mcpx.spec.revision import Era, Revision
from mcpx.upstream.channel import Channel, TransportRefused
from mcpx.upstream.handlers import NO_HANDLERS, UpstreamHandlers
from mcpx.upstream.records import AnsweredModern, AnsweredWithoutRevision, NotModern, UpstreamError
from mcpx.upstream.session import UpstreamSession
from mcpx.wire.errors import (
    HEADER_MISMATCH,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
    RpcError,
)
from mcpx.wire.peer import ConnectionClosed, RequestTimedOut

log = Logger()

ServerConfig = StdioServer | RemoteServer

#: Errors only a 2026-07-28 server sends: an answer with one of them is a modern server.
MODERN_ERRORS = frozenset(
    {HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION}
)

#: HTTP statuses with which a 2024-11-05 HTTP+SSE server refuses a POST to its GET URL.
HTTP_SSE_HINTS = frozenset({400, 404, 405})

CACHE_NAME = "upstream-eras.json"

#: How the era cache spells a server found to speak 2024-11-05's HTTP+SSE transport
#: (beside the L{Era} values of the rest).
HTTP_SSE: Final = "http+sse"


@frozen
class Found:
    """
    How a server is opened, as its probe found it: its L{Era}, and whether over
    2024-11-05's HTTP+SSE transport (legacy, but over a GET stream and an endpoint)
    rather than the transport its configuration names.
    """

    era: Era
    http_sse: bool = False

    @classmethod
    def parse(cls, spelled: str) -> Found:
        """The finding the era cache spells C{spelled} (L{value}): C{ValueError} if none."""
        if spelled == HTTP_SSE:
            return cls(Era.LEGACY, http_sse=True)
        return cls(Era(spelled))

    @property
    def value(self) -> str:
        """How the era cache spells it: the era's value, or C{"http+sse"}."""
        return HTTP_SSE if self.http_sse else self.era.value


def era_key(server: ServerConfig) -> str:
    """
    A stable hash of what decides a server's era: for stdio the command, its
    arguments, environment and directory; for HTTP the URL and headers.  Secrets are
    part of the hash but never stored in clear.
    """
    if isinstance(server, StdioServer):
        decisive: dict[str, Any] = {
            "command": server.command,
            "args": list(server.args),
            "env": {k: _reveal(v) for k, v in sorted(server.env.items())},
            "cwd": server.cwd,
        }
    else:
        decisive = {
            "url": _reveal(server.url),
            "headers": {k: _reveal(v) for k, v in sorted(server.headers.items())},
        }
    if server.protocol:
        decisive["protocol"] = server.protocol
    encoded = json.dumps(decisive, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:32]


def _reveal(value: Any) -> Any:
    reveal = getattr(value, "reveal", None)
    return reveal() if callable(reveal) else value


@define
class EraCache:
    """
    Remembered eras, by L{era_key}.

    The file is small and written whole (to a temporary file, then renamed, so a
    crash never leaves half of it); reading and writing it is a few hundred bytes of
    local I/O, once per server configuration.
    """

    path: Path | None
    _entries: dict[str, dict[str, str]] = field(factory=dict)

    @classmethod
    def load(cls, path: Path | None) -> EraCache:
        """Read the cache; a missing file is empty, a corrupt one is ignored with a warning."""
        cache = cls(path)
        if path is None or not path.exists():
            return cache
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entries = data["eras"]
            if not isinstance(entries, dict):
                raise TypeError("eras is not an object")
            for key, entry in entries.items():
                Found.parse(entry["era"])
                cache._entries[key] = {"era": entry["era"], "revision": entry.get("revision", "")}
        except Exception as e:
            log.warn("ignoring the era cache {path}: {why}", path=str(path), why=str(e))
            cache._entries.clear()
        return cache

    def get(self, key: str) -> Found | None:
        entry = self._entries.get(key)
        return None if entry is None else Found.parse(entry["era"])

    def put(self, key: str, era: Era, revision: Revision, *, http_sse: bool = False) -> None:
        entry = {"era": Found(era, http_sse).value, "revision": revision.value}
        if self._entries.get(key) == entry:
            return
        self._entries[key] = entry
        self._write()

    def forget(self, key: str) -> None:
        if self._entries.pop(key, None) is not None:
            self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=".upstream-eras.", dir=str(self.path.parent))
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"version": 1, "eras": self._entries}, out, indent=1, sort_keys=True)
            os.replace(temporary, self.path)
        except OSError as e:
            log.warn("cannot write the era cache {path}: {why}", path=str(self.path), why=str(e))


ChannelFactory = Callable[[str, ServerConfig], Channel]
#: Makes the channel of one principal's instance: (name, config, principal).
PrincipalChannelFactory = Callable[[str, ServerConfig, str], Channel]


@define
class Connector:
    """
    Opens sessions to upstream servers: makes the channel, finds the era (from the
    cache or by probing), and hands back an open L{UpstreamSession}.

    @ivar channels: makes the channel for a server config (stdio or Streamable HTTP).
    @ivar http_sse_channels: makes a 2024-11-05 HTTP+SSE channel, the HTTP fallback.
    @ivar probe_timeout: how long the modern probe waits before deciding "legacy".
    @ivar open_timeout: bound on opening a session once the era is known.
    @ivar lenient: 2026-07-28 is in C{spec.lenient} (answer a modern server's requests).
    @ivar principal_channels: makes the channel of one principal's instance (a remote
        server each principal signs in to for itself): the server's requests carry
        that principal's credentials.

    One probe at a time per configuration: a start while another probes the same
    configuration waits for that probe's outcome and opens the server in the era it
    found (or probes in turn, if it found none).
    """

    clock: IReactorTime
    cache: EraCache
    channels: ChannelFactory
    http_sse_channels: ChannelFactory | None = None
    probe_timeout: float = 5.0
    open_timeout: float = 30.0
    lenient: bool = False
    max_rounds: int = 8
    principal_channels: PrincipalChannelFactory | None = None
    #: The era keys a start is probing now, each with the starts of the same
    #: configuration waiting for its outcome (shared with the per-principal copies).
    _probing: dict[str, list[Deferred[None]]] = field(factory=dict)

    async def connect(
        self,
        name: str,
        server: ServerConfig,
        handlers: UpstreamHandlers = NO_HANDLERS,
        *,
        principal: str | None = None,
        era: Era | None = None,
    ) -> UpstreamSession:
        """
        An open session to C{server}.

        @param principal: whose credentials its requests carry, for an instance of one
            principal's (L{principal_channels}); C{None} for the server's own.
        @param era: L{Era.LEGACY} for the legacy-era instance of a server found modern
            (era mirroring, L{mirror_legacy}); C{None} for the era the probe finds.
        @raise UpstreamError: naming the server and why it could not be reached.
        """
        if server.misconfigured is not None:
            # Nothing is started with a configuration the daemon could not complete.
            raise UpstreamError(name, server.misconfigured)
        if principal is not None:
            factory = self.principal_channels
            if factory is None:
                raise UpstreamError(name, "this daemon cannot reach a server per person")

            def channels(name: str, server: ServerConfig) -> Channel:
                assert factory is not None and principal is not None
                return factory(name, server, principal)

            mine = evolve(self, channels=channels, http_sse_channels=None, principal_channels=None)
            return await mine.connect(name, server, handlers, era=era)
        if era is Era.LEGACY:
            return await self.mirror_legacy(name, server, handlers)
        if server.protocol:
            era, offered = pinned(server.protocol)
            session, _ = await self._open_as(era, name, server, handlers, offered=offered)
            return session
        key = era_key(server)
        # Another start of this configuration is finding its era: wait for its outcome
        # rather than probe as well (a server that ends the connection on the probe
        # would be made to end it once per concurrent start).
        while key in self._probing and self.cache.get(key) is None:
            ended: Deferred[None] = Deferred()
            self._probing[key].append(ended)
            await ended
        remembered = self.cache.get(key)
        if remembered is not None:
            try:
                session, _ = await self._open_as(
                    remembered.era, name, server, handlers, http_sse=remembered.http_sse
                )
            except (UpstreamError, RpcError, TransportRefused, DeferredTimeout) as e:
                if not era_in_doubt(e):
                    # A server that is down, busy, slow or wants credentials would answer
                    # a probe the same way: the era it was found to speak still holds.
                    if isinstance(e, TransportRefused):
                        raise UpstreamError(name, f"opening the session was refused: {e}") from e
                    raise
                log.info(
                    "upstream {server}: the remembered era {era} failed ({why}); probing again",
                    server=name,
                    era=remembered.value,
                    why=str(e),
                )
                self.cache.forget(key)
            else:
                return session
        if key in self._probing:
            # Forgotten while another start probes it: that probe's outcome will do.
            return await self.connect(name, server, handlers)
        self._probing[key] = []
        try:
            session, found = await self._probe(name, server, handlers)
            self.cache.put(key, found.era, session.revision, http_sse=found.http_sse)
        finally:
            for waiting in self._probing.pop(key):
                if not waiting.called:
                    waiting.callback(None)
        return session

    def era_known(self, server: ServerConfig) -> bool:
        """
        Whether a start of C{server} opens it in an era already known (pinned by its
        C{protocol}, or remembered), rather than probing for it first, which may take
        up to C{probe_timeout} and, for a server that ends the connection on the probe,
        a second start.
        """
        return bool(server.protocol) or self.cache.get(era_key(server)) is not None

    async def mirror_legacy(
        self, name: str, server: ServerConfig, handlers: UpstreamHandlers
    ) -> UpstreamSession:
        """
        A legacy-era session to a server found modern, for the calls of handshake-era
        hosts (era mirroring): C{initialize} on a new connection.  A dual-era server
        takes it; a server that speaks only 2026-07-28 refuses it (or answers with a
        modern revision, or ends the connection), and is opened as modern instead, so
        those hosts' calls are bridged as before; so is a Streamable HTTP server that
        takes C{initialize} without giving a session (L{sessionless}): it cannot hear
        its client's answers in that era.  The probe's cache is not touched: the
        server's own era is still the modern one.
        """
        try:
            session, _ = await self._open_as(Era.LEGACY, name, server, handlers)
        except (
            RpcError,
            AnsweredModern,
            AnsweredWithoutRevision,
            NotModern,
            ConnectionClosed,
            TransportRefused,
        ) as e:
            log.info(
                "upstream {server} does not take initialize ({why}): it speaks 2026-07-28 "
                "alone, and handshake-era hosts are bridged to it",
                server=name,
                why=str(e),
            )
            session, _ = await self._open_as(Era.MODERN, name, server, handlers)
            return session
        if sessionless(session.channel):
            # A Streamable HTTP server that keeps no legacy session serves each POST on
            # its own (the TypeScript SDK 2.x "per-request legacy serving"): it cannot
            # hear the answer to a request of its own, so it cannot ask in that era,
            # while its 2026-07-28 rounds can.
            await session.close()
            log.info(
                "upstream {server} takes initialize without a session, so it cannot ask "
                "on a legacy connection: handshake-era hosts are bridged to it",
                server=name,
            )
            session, _ = await self._open_as(Era.MODERN, name, server, handlers)
            return session
        log.info(
            "upstream {server} speaks both eras: handshake-era hosts meet it in theirs "
            "({revision})",
            server=name,
            revision=session.revision.value,
        )
        return session

    def _session(
        self,
        kind: type[UpstreamSession],
        name: str,
        channel: Channel,
        handlers: UpstreamHandlers,
        **extra: Any,
    ) -> UpstreamSession:
        return kind(
            name=name,
            channel=channel,
            clock=self.clock,
            handlers=handlers,
            lenient=self.lenient,
            max_rounds=self.max_rounds,
            **extra,
        )

    def _channel(self, name: str, server: ServerConfig, http_sse: bool = False) -> Channel:
        factory = self.http_sse_channels if http_sse else self.channels
        if factory is None:
            raise UpstreamError(name, "no HTTP+SSE transport is available")
        return factory(name, server)

    async def _modern_after_all(
        self,
        name: str,
        server: ServerConfig,
        handlers: UpstreamHandlers,
        how: str,
        why: Exception,
    ) -> tuple[UpstreamSession, Found]:
        """A server that C{how} (answered or refused) initialize as a modern one: open it so."""
        log.info(
            "upstream {server} {how} initialize as a 2026-07-28 server ({why}); "
            "opening it again as one",
            server=name,
            how=how,
            why=str(why),
        )
        return await self._open_as(Era.MODERN, name, server, handlers)

    async def _open_as(
        self,
        era: Era,
        name: str,
        server: ServerConfig,
        handlers: UpstreamHandlers,
        offered: Revision | None = None,
        *,
        http_sse: bool = False,
    ) -> tuple[UpstreamSession, Found]:
        """
        A session in C{era} on a new channel.

        @param offered: the legacy revision C{initialize} offers, when pinned.
        @param http_sse: over 2024-11-05's HTTP+SSE transport (a legacy C{era}'s).
        """
        # Deferred for start-up memory: an idle daemon has started no upstream yet.
        from mcpx.upstream.legacy_session import LegacySession
        from mcpx.upstream.modern_session import ModernSession

        channel = self._channel(name, server, http_sse=http_sse)
        if era is Era.MODERN:
            session = self._session(ModernSession, name, channel, handlers)
        elif offered is not None:
            session = self._session(LegacySession, name, channel, handlers, offered=offered)
        else:
            session = self._session(LegacySession, name, channel, handlers)
        try:
            await channel.start()
            await session.open(timeout=self.open_timeout)
        except BaseException:
            await channel.close()
            raise
        return session, Found(era, http_sse)

    async def _probe(
        self, name: str, server: ServerConfig, handlers: UpstreamHandlers
    ) -> tuple[UpstreamSession, Found]:
        from mcpx.upstream.legacy_session import LegacySession  # deferred as in _open_as
        from mcpx.upstream.modern_session import ModernSession

        channel = self._channel(name, server)
        modern = self._session(ModernSession, name, channel, handlers)
        try:
            await channel.start()
        except BaseException:
            await channel.close()
            raise
        # Whether server/discover went unanswered (rather than refused) in the probe's time.
        unanswered = False
        try:
            await modern.open(timeout=self.probe_timeout)
        except RpcError as e:
            if e.code in MODERN_ERRORS and e.code != UNSUPPORTED_PROTOCOL_VERSION:
                await channel.close()
                raise UpstreamError(name, f"the modern server refused server/discover: {e}") from e
            why = f"server/discover answered {e}"
        except NotModern as e:
            why = str(e)
        except (RequestTimedOut, DeferredTimeout):
            why = f"no answer to server/discover within {self.probe_timeout}s"
            unanswered = True
        except TransportRefused as e:
            why = f"server/discover refused: {e}"
        except ConnectionClosed as e:
            why = str(e)
        except BaseException:
            await channel.close()
            raise
        else:
            log.info("upstream {server} speaks 2026-07-28", server=name)
            return modern, Found(Era.MODERN)
        log.info("upstream {server} is not modern ({why}); initializing", server=name, why=why)
        if modern.rpc.closed:
            await channel.close()
            return await self._legacy_again(name, server, handlers, why)

        # Same connection, new session: a legacy server that ignored the probe is still there.
        legacy = self._session(LegacySession, name, channel, handlers, peer=modern.rpc)
        try:
            await legacy.open(timeout=self.open_timeout)
        except AnsweredModern as e:
            # A modern server slower than the probe waits that takes initialize all the
            # same (the TypeScript SDK answers it with its newest revision): it is
            # modern, and is opened again as such.
            await channel.close()
            return await self._modern_after_all(name, server, handlers, "answered", e)
        except AnsweredWithoutRevision as e:
            await channel.close()
            if not unanswered:
                raise
            # A modern server too slow for the probe that answers initialize with some
            # result of its own (one of the conformance suite's does): no handshake
            # server leaves out the revision, so it is tried as modern before giving up.
            try:
                return await self._modern_after_all(name, server, handlers, "answered", e)
            except Exception:
                raise e from None
        except RpcError as e:
            await channel.close()
            if e.code not in MODERN_ERRORS:
                raise
            # A modern server slower to start than the probe waits (a Python server on
            # a busy machine): it answered the probe late and now refuses initialize.
            return await self._modern_after_all(name, server, handlers, "refused", e)
        except ConnectionClosed as e:
            # The server ended the connection on the probe, and it was seen only now.
            await channel.close()
            return await self._legacy_again(name, server, handlers, str(e))
        except TransportRefused as e:
            await channel.close()
            if not isinstance(server, RemoteServer) or e.status not in HTTP_SSE_HINTS:
                raise UpstreamError(name, f"initialize was refused: {e}") from e
            log.info(
                "upstream {server} refused initialize with HTTP {status}; trying HTTP+SSE",
                server=name,
                status=e.status,
            )
            return await self._open_as(Era.LEGACY, name, server, handlers, http_sse=True)
        except BaseException:
            await channel.close()
            raise
        return legacy, Found(Era.LEGACY)

    async def _legacy_again(
        self, name: str, server: ServerConfig, handlers: UpstreamHandlers, why: str
    ) -> tuple[UpstreamSession, Found]:
        """
        A server that ended the connection on C{server/discover} (the Python SDK up to
        1.8 exits on a method it does not know), started again and opened as a legacy
        one: it never sees the probe again.
        """
        log.info(
            "upstream {server} ended the connection on server/discover ({why}); "
            "starting it again and initializing",
            server=name,
            why=why,
        )
        return await self._open_as(Era.LEGACY, name, server, handlers)


def sessionless(channel: Channel) -> bool:
    """
    Whether C{channel} is a Streamable HTTP connection whose server gave no session id
    in answer to C{initialize} (stdio and HTTP+SSE connections are sessions of their own).
    """
    # Only a Streamable HTTP channel has a session id to give (None when it gave none).
    return getattr(channel, "session_id", "") is None


def pinned(protocol: str) -> tuple[Era, Revision | None]:
    """
    The era a server entry's C{protocol} pins, and the legacy revision C{initialize}
    offers (C{None}: the newest).
    """
    if protocol == "modern":
        return Era.MODERN, None
    if protocol == "legacy":
        return Era.LEGACY, None
    revision = Revision(protocol)
    if revision.is_modern:
        return Era.MODERN, None
    return Era.LEGACY, revision


#: Statuses that say nothing about which era a server speaks.
_NOT_ABOUT_ERA: Final = frozenset({401, 403, 407, 408, 429, 500, 502, 503, 504})


def era_in_doubt(error: BaseException) -> bool:
    """
    Whether opening a session in the remembered era failed in a way that may mean the
    server now speaks another (so probing again is worth it).
    """
    if isinstance(error, DeferredTimeout):
        return False
    refused = error if isinstance(error, TransportRefused) else error.__cause__
    if isinstance(refused, TransportRefused):
        return refused.status not in _NOT_ABOUT_ERA
    return True


def cache_path(state_dir: Path) -> Path:
    return state_dir / CACHE_NAME
