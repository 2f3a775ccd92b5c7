# -*- test-case-name: tests.daemon.test_gate,tests.cli.test_token_command -*-
"""
The daemon's bearer token: C{<state>/token}, readable by its owner only.

A client that is not the daemon's own user on loopback sends it as
C{Authorization: Bearer <token>} (L{mcpx.daemon.gate}).  It is made at the daemon's
first start (or by the first C{mcpx token}), and C{mcpx token --rotate} replaces it;
the running daemon notices the new file (L{TokenFile}), so the old token stops working
within a second.

Standard library only: C{mcpx token} imports this without Twisted.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Callable
from pathlib import Path

#: The token's file in the state directory.
TOKEN_NAME = "token"

#: How often, at most, the daemon looks whether the token file changed.
RECHECK_INTERVAL = 1.0


def token_path(state_dir: Path) -> Path:
    return state_dir / TOKEN_NAME


def new_token() -> str:
    """32 random bytes, URL-safe base64: safe in a header and a JSON file alike."""
    return secrets.token_urlsafe(32)


def _write_private(path: Path, text: str) -> Path:
    """Write C{text} to a fresh file beside C{path}, mode 0600 from its creation."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, (text + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return scratch


def read_token(state_dir: Path) -> str:
    """
    The token, made first if there is none yet.

    Two processes making it at once agree: the file appears whole or not at all
    (C{link} refuses to replace it), and the loser reads the winner's.
    """
    path = token_path(state_dir)
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    scratch = _write_private(path, new_token())
    try:
        os.link(scratch, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(scratch)
    return _read(path)


def rotate_token(state_dir: Path) -> str:
    """Replace the token with a new one, at once for every reader, and return it."""
    token = new_token()
    scratch = _write_private(token_path(state_dir), token)
    os.replace(scratch, token_path(state_dir))
    return token


def _read(path: Path) -> str:
    text = path.read_text(encoding="ascii").strip()
    if not text:
        raise FileNotFoundError(path)
    return text


class TokenFile:
    """
    The daemon's view of the token file: the token in memory, re-read when the file
    has changed.

    Whether it changed is looked at (one C{stat}) at most once per
    L{RECHECK_INTERVAL}, and at once when a client offers a token that does not match,
    so a rotated token works immediately and the old one stops within the interval.

    @ivar seconds: the clock's time function.
    """

    def __init__(self, state_dir: Path, seconds: Callable[[], float]) -> None:
        self._path = token_path(state_dir)
        self._seconds = seconds
        self._token = read_token(state_dir).encode("ascii")
        os.chmod(self._path, 0o600)
        self._stamp = self._stat()
        self._checked = seconds()

    def _stat(self) -> tuple[int, int] | None:
        try:
            status = os.stat(self._path)
        except OSError:
            return None
        return status.st_ino, status.st_mtime_ns

    def _refresh(self) -> None:
        self._checked = self._seconds()
        stamp = self._stat()
        if stamp is None or stamp == self._stamp:
            return
        try:
            self._token = _read(self._path).encode("ascii")
        except (OSError, UnicodeError):
            # Half-written by hand or removed: keep the last token rather than none.
            return
        self._stamp = stamp

    def matches(self, offered: bytes) -> bool:
        """Whether C{offered} is the current token, compared in constant time."""
        if self._seconds() - self._checked >= RECHECK_INTERVAL:
            self._refresh()
        if hmac.compare_digest(offered, self._token):
            return True
        self._refresh()
        return hmac.compare_digest(offered, self._token)
