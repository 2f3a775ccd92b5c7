# -*- test-case-name: tests.store.test_config -*-
"""
Which store the daemon keeps its records in: the SQLite file in its state directory, or the
PostgreSQL database C{store.url} names.

The password of the database is never part of the URL as written (a URL can come from a
flag, and flags show in C{ps}): it comes from C{store.passwordFile}, or from an environment
variable the URL names as C{${NAME}} in its password place, or from libpq's own
C{PGPASSWORD} and C{~/.pgpass}.  A URL written with a literal password is refused.  The
password found is given to libpq apart from the URL and added to the daemon's masker, and
what the daemon shows of the store (L{StoreTarget.description}) has no password in it.

L{mcpx.store.postgres}, and psycopg with it, is imported here only when a PostgreSQL URL is
configured.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final, cast
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from attrs import field, frozen
from twisted.internet.interfaces import IReactorCore

from mcpx.settings.errors import SettingsError
from mcpx.store.records import RecordStore
from mcpx.store.sqlite import SQLiteRecords

#: The URL schemes that select PostgreSQL.
SCHEMES: Final = ("postgresql", "postgres")

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class StoreSettingError(SettingsError):
    """C{store.url} or C{store.passwordFile} cannot be used; the message says why."""


@frozen
class StoreTarget:
    """
    A PostgreSQL database to connect to.

    @ivar conninfo: the URL as libpq takes it, without its password.
    @ivar description: what is shown of it: the same, for people.
    @ivar password: given to libpq apart from the URL; never shown.
    """

    conninfo: str
    description: str
    password: str | None = field(default=None, repr=False)


def postgres_target(url: str, password_file: str, environ: Mapping[str, str]) -> StoreTarget:
    """
    Read C{store.url} and C{store.passwordFile}.

    @raise StoreSettingError: not a PostgreSQL URL, a literal password in it, a variable it
        names that is not set, a password file that cannot be read.
    """
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise StoreSettingError(
            f"store.url must start with postgresql:// (or be empty for SQLite), not {url!r}"
        )
    if any(key.lower() == "password" for key, _ in parse_qsl(parts.query)):
        raise StoreSettingError(
            "store.url must not carry a password parameter: use store.passwordFile or "
            "${NAME} in the URL's password place"
        )
    password: str | None = None
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        user, _, written = userinfo.partition(":")
        variable = _VARIABLE.fullmatch(written)
        if variable is None:
            raise StoreSettingError(
                "store.url must not carry a literal password: use store.passwordFile, or "
                "${NAME} in its place to read it from the environment variable NAME"
            )
        name = variable.group(1)
        if name not in environ:
            raise StoreSettingError(
                f"store.url reads the password from ${{{name}}}, which is unset"
            )
        password = environ[name]
        netloc = f"{user}@{host}"
    if password_file:
        if password is not None:
            raise StoreSettingError(
                "store.url names a password variable and store.passwordFile is set: keep one"
            )
        try:
            password = Path(password_file).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as e:
            raise StoreSettingError(
                f"store.passwordFile {password_file} cannot be read: {e.strerror}"
            ) from e
    conninfo = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return StoreTarget(conninfo=conninfo, description=conninfo, password=password or None)


def store_target(url: str, password_file: str, environ: Mapping[str, str]) -> StoreTarget | None:
    """The PostgreSQL database C{store.url} names, or C{None} (empty: SQLite)."""
    return postgres_target(url, password_file, environ) if url else None


def open_records(
    target: StoreTarget | None, *, threads: int, sqlite_path: str, reactor: IReactorCore
) -> RecordStore:
    """
    The records store (not opened yet): PostgreSQL at C{target}, or the SQLite file at
    C{sqlite_path} when there is none.
    """
    if target is None:
        return SQLiteRecords(sqlite_path, reactor)
    # Imported only now: a daemon on SQLite never loads psycopg.
    postgres = importlib.import_module("mcpx.store.postgres")
    records = postgres.PostgresRecords(
        target.conninfo,
        reactor,
        password=target.password,
        threads=threads,
        description=target.description,
    )
    return cast(RecordStore, records)
