# -*- test-case-name: tests.server.test_key_ring -*-
"""
The key file of C{proto.stateKeyFile}: the keys every daemon of a fleet signs and
verifies the 2026-07-28 C{requestState} with.

The file is text, one key a line; blank lines and lines starting with C{#} are skipped.
A line is three fields separated by spaces::

    <id> <since> <secret>

    k2026a 2026-12-01T00:00:00Z 3q2-7wAAAAC4fB2Yv1b0P3cNqzq3ZbqZlmm4QmY2XhU

C{id} names the key in every state it signs (letters, digits, C{.}, C{_}, C{-}; at most
40).  C{since} is when it starts signing: an ISO 8601 time in UTC (C{Z}) or Unix seconds.
C{secret} is at least 32 random bytes, base64url (C{=} padding optional).  The newest key
whose C{since} has come signs; each older one still verifies for C{proto.stateTTL} after
the key that follows it took over, then is refused.

The file holds secrets: one that others than its owner and group may read is refused, as
is a key shorter than 32 bytes.  No error here quotes a secret.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from datetime import datetime
from typing import Final

from attrs import field, frozen

from mcpx.settings.errors import SettingsError

#: The shortest secret accepted, in bytes.
MIN_SECRET: Final = 32

_ID = re.compile(r"[A-Za-z0-9._-]{1,40}")


class StateKeyError(SettingsError):
    """C{proto.stateKeyFile} cannot be used; the message says why, never a secret."""


@frozen
class StateKey:
    """
    One key of the file.

    @ivar id: what states signed with it carry.
    @ivar since: clock seconds from which it signs.
    @ivar secret: the HMAC key; never shown.
    """

    id: str
    since: float
    secret: bytes = field(repr=False)


def _since(text: str, where: str) -> float:
    try:
        return float(int(text))
    except ValueError:
        pass
    if not text.endswith("Z"):
        raise StateKeyError(f"{where}: the time must be UTC, ending in Z, or Unix seconds")
    try:
        return datetime.fromisoformat(text[:-1] + "+00:00").timestamp()
    except ValueError:
        raise StateKeyError(f"{where}: {text!r} is not an ISO 8601 time") from None


def _secret(text: str, where: str) -> bytes:
    try:
        secret = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise StateKeyError(f"{where}: the secret is not base64url") from None
    if len(secret) < MIN_SECRET:
        raise StateKeyError(f"{where}: the secret is shorter than {MIN_SECRET} bytes")
    return secret


def parse_state_keys(text: str, path: str) -> tuple[StateKey, ...]:
    """The keys in C{text}, the file C{path}, oldest first."""
    keys: dict[str, StateKey] = {}
    for number, written in enumerate(text.splitlines(), 1):
        line = written.strip()
        if not line or line.startswith("#"):
            continue
        where = f"proto.stateKeyFile {path} line {number}"
        fields = line.split()
        if len(fields) != 3:
            raise StateKeyError(f"{where}: expected <id> <since> <secret>")
        key_id, since, secret = fields
        if _ID.fullmatch(key_id) is None:
            raise StateKeyError(f"{where}: a key id is 1 to 40 letters, digits, '.', '_' or '-'")
        if key_id in keys:
            raise StateKeyError(f"{where}: the key id {key_id} is given twice")
        keys[key_id] = StateKey(key_id, _since(since, where), _secret(secret, where))
    if not keys:
        raise StateKeyError(f"proto.stateKeyFile {path} holds no key")
    return tuple(sorted(keys.values(), key=lambda key: key.since))


def read_state_keys(path: str) -> tuple[StateKey, ...]:
    """
    Read and check the key file at C{path}.

    @raise StateKeyError: it is not an absolute path, cannot be read, others may read
        it, or a line is wrong.
    """
    expanded = os.path.expanduser(path)
    if not os.path.isabs(expanded):
        raise StateKeyError(f"proto.stateKeyFile {path} must be an absolute path (or start with ~)")
    try:
        with open(expanded, "rb") as opened:
            mode = os.fstat(opened.fileno()).st_mode
            data = opened.read()
    except OSError as e:
        raise StateKeyError(
            f"proto.stateKeyFile {path} cannot be read ({e.strerror or e})"
        ) from None
    if stat.S_IMODE(mode) & 0o007:
        raise StateKeyError(
            f"proto.stateKeyFile {path} may be read by other users "
            f"(mode {stat.S_IMODE(mode):04o}): chmod o-rwx it"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise StateKeyError(f"proto.stateKeyFile {path} is not UTF-8 text") from None
    return parse_state_keys(text, path)


def file_stamp(path: str) -> tuple[float, int] | None:
    """When the file at C{path} last changed and its size, to tell a new version by."""
    try:
        found = os.stat(os.path.expanduser(path))
    except OSError:
        return None
    return (found.st_mtime, found.st_size)
