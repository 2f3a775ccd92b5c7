# -*- test-case-name: tests.daemon.test_fleet_config -*-
"""
A configuration change made on one daemon of a fleet, heard by the others.

What is shared is the config file: the daemons of a fleet are started with the same one
(one path on one host, as C{mcpx@.service} does, or a file every host is given alike).
A daemon that applied a reload of its own (C{mcpx add}, C{mcpx remove}, C{mcpx import},
C{POST /v1/reload}, C{SIGHUP}) writes a notice to the shared store: one row of kind
L{CONFIG}, naming the daemon, a digest of the file it read and a notice id of its own.
The C{NOTIFY} of that write reaches the others, which each reload their own config file
the way C{SIGHUP} does (so their hosts hear C{list_changed} as after a local change),
without announcing again.  A daemon whose file's digest differs from the notice's still
reloads what it has, and warns that its file is not the one the other daemon read.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mcpx.ops.reloading import Reloads
from mcpx.store.records import CONFIG, Record, RecordStore, StoreClosed
from mcpx.store.writes import Writes

log = Logger()

#: The id of the one notice row.
NOTICE: Final = "last"


def file_digest(path: str | None) -> str | None:
    """The SHA-256 of the file at C{path}, or C{None} if there is none to read."""
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


class ConfigNotices:
    """
    One daemon's side of the fleet's configuration notices.

    @ivar daemon: this daemon's id (its heartbeat's).
    """

    def __init__(
        self,
        records: RecordStore,
        daemon: str,
        clock: IReactorTime,
        path: str | None,
        reload: Callable[[], Deferred[Any]],
        *,
        reloads: Reloads | None = None,
    ) -> None:
        """
        @param path: the config file this daemon runs from.
        @param reload: reloads it as C{SIGHUP} does, without announcing the reload.
        @param reloads: the daemon's reloads, each made here announced (L{announce}).
        """
        self.daemon = daemon
        self._records = records
        self._clock = clock
        self._path = path
        self._reload = reload
        self._writes = Writes()
        #: The id of the last notice this daemon acted on or wrote.
        self._seen: str | None = None
        self._started = False
        self._stopped = False
        if reloads is not None:
            reloads.announce_with(self.announce)

    def start(self) -> None:
        """Listen for the other daemons' notices."""
        self._records.listen(self._heard)

    def announce(self) -> None:
        """This daemon applied a reload of its own: tell the others (L{Reloads.announce_with})."""
        notice = secrets.token_hex(8)
        self._seen = notice
        body = {
            "notice": notice,
            "daemon": self.daemon,
            "digest": file_digest(self._path),
            "at": self._clock.seconds(),
        }
        self._writes.track(
            self._records.put(CONFIG, Record(NOTICE, None, "changed", None, json.dumps(body))),
            "tell the other daemons of the configuration change",
        )

    def _heard(self, kind: str | None, record_id: str | None) -> None:
        if kind is None or (kind == CONFIG and record_id == NOTICE):
            self._writes.track(
                Deferred.fromCoroutine(self._quietly(kind is None and not self._started)),
                "read the fleet's configuration notice",
            )

    async def _quietly(self, first: bool) -> None:
        if self._stopped:
            return
        try:
            await self._read(first=first)
        except StoreClosed:
            # The daemon is stopping: nothing to reload.
            return
        except Exception as e:
            # The store restarting, say: its listening again makes this read again.
            log.warn("could not read the fleet's configuration notice: {error}", error=str(e))

    async def _read(self, *, first: bool) -> None:
        record = await self._records.get(CONFIG, NOTICE)
        if first:
            # Listening from the start: the notice there already is older than this
            # daemon's reading of its file.
            self._started = True
            if record is not None and self._seen is None:
                self._seen = json.loads(record.body).get("notice")
            return
        if record is None:
            return
        body = json.loads(record.body)
        notice = body.get("notice")
        if notice == self._seen or body.get("daemon") == self.daemon:
            return
        self._seen = notice
        other = body.get("daemon")
        if body.get("digest") != file_digest(self._path):
            log.warn(
                "the daemon {other} changed the configuration, but this daemon's config "
                "file {path} is not the file it read: reloading this one as it is",
                other=other,
                path=self._path,
            )
        log.info("the daemon {other} changed the configuration: reloading", other=other)
        await self._reload()

    def stop(self) -> Deferred[None]:
        """Fires once the notices being written or read have been."""
        self._stopped = True
        return self._writes.settled()
