# -*- test-case-name: tests.settings.test_secrets -*-
"""
Masking the credentials mcpx resolved wherever text leaves the daemon.

The config file's secrets are sent to upstream servers, and an upstream can send
them back: a remote server that quotes the C{Authorization} header it refused, a
child that prints its environment in a crash.  Whatever an upstream says ends up
in an error answer, a server's C{last_error}, an event or the log, so every value
the daemon knows to be a credential is replaced there by C{***}.

What counts as a credential:

  - every value of an C{auth} block (token, password, user name, header, query or
    environment value), and the user name and password of a URL's user information;
  - the values of C{headers} and C{env} entries, and of a URL's query parameters,
    whose name looks like a credential (L{CREDENTIAL_NAME}: C{TOKEN}, C{SECRET},
    C{KEY}, C{PASSWORD}, C{AUTH}, ...); C{PATH=/usr/bin} or C{Accept: text/plain}
    are configuration, and masking them would garble every message that names them.

Each value is masked as written and as it is usually re-encoded on the way back:
URL-encoded (both spellings of a space), escaped inside a JSON string, and for
basic auth the base64 of C{user:password}.  Values shorter than L{MIN_LENGTH}
characters are not masked: replacing every C{"dev"} in every message would make
the messages unreadable and protect nothing such a guessable value could.

The masker is one compiled regular expression, longest value first.  With no
secrets configured it does no work at all.  It remembers the secrets of every
configuration it was given (see L{SecretMasker.learn}), so an instance of the old
configuration that is still shutting down after a reload is masked too.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

from mcpx.settings.servers import (
    REDACTED,
    Auth,
    AuthType,
    RemoteServer,
    Secret,
    Server,
    ServersConfig,
)

#: Shorter values are not masked (see the module docstring).
MIN_LENGTH = 4

#: A header, variable or query parameter whose name matches holds a credential.
CREDENTIAL_NAME = re.compile(
    r"TOKEN|SECRET|KEY|PASSW|PASSPHRASE|PWD|AUTH|CREDENTIAL|COOKIE|SESSION|PRIVATE|SIGNATURE",
    re.IGNORECASE,
)


#: The characters of a token, key or password as they are usually written.
_CREDENTIAL_TAIL = re.compile(r"[A-Za-z0-9._~+/=%-]+$")


def excerpt(raw: bytes, limit: int) -> str:
    """
    The start of what an upstream sent (at most C{limit} bytes), to quote in an error
    or the log.  The masker replaces only whole values, so a credential cut in half
    at the limit would escape it: when the text is cut, the word it was cut in goes
    too, and C{...} says something was left out.
    """
    text = raw[:limit].decode("utf-8", "replace")
    if len(raw) <= limit:
        return text
    return _CREDENTIAL_TAIL.sub("", text) + "..."


def encodings(value: str) -> Iterator[str]:
    """C{value} and the forms it is usually sent back in."""
    yield value
    yield quote(value, safe="")
    yield quote_plus(value, safe="")
    # Percent-escapes come back in lower case from some servers.
    yield re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(value, safe=""))
    # Inside a JSON string (the log is JSON lines; error bodies are often JSON).
    yield json.dumps(value)[1:-1]
    yield json.dumps(value, ensure_ascii=False)[1:-1]


def _basic_pair(username: str, password: str) -> Iterator[str]:
    pair = f"{username}:{password}"
    yield pair
    encoded = base64.b64encode(pair.encode()).decode("ascii")
    yield encoded
    yield encoded.rstrip("=")


def _auth_values(auth: Auth) -> Iterator[str]:
    yield auth.secret.reveal()
    if auth.oauth is not None and auth.oauth.private_key is not None:
        yield auth.oauth.private_key.pem.reveal()
    if auth.type is AuthType.BASIC and auth.username is not None:
        yield auth.username.reveal()
        yield from _basic_pair(auth.username.reveal(), auth.secret.reveal())


def _named_values(values: Mapping[str, Secret]) -> Iterator[str]:
    for name, value in values.items():
        if CREDENTIAL_NAME.search(name):
            yield value.reveal()


def _url_values(url: str) -> Iterator[str]:
    parts = urlsplit(url)
    if parts.password is not None:
        yield parts.password
        yield from _basic_pair(parts.username or "", parts.password)
    if parts.username:
        yield parts.username
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if CREDENTIAL_NAME.search(name):
            yield value


def server_secrets(server: Server) -> Iterator[str]:
    """Every credential of one server, as configured (before encoding)."""
    if server.auth is not None:
        yield from _auth_values(server.auth)
    if isinstance(server, RemoteServer):
        yield from _named_values(server.headers)
        yield from _url_values(server.url)
    else:
        yield from _named_values(server.env)


def secret_forms(values: Iterable[str]) -> set[str]:
    """The texts to mask for C{values}: each in every encoding, short ones left out."""
    return {
        form
        for value in values
        if len(value) >= MIN_LENGTH
        for form in encodings(value)
        if len(form) >= MIN_LENGTH
    }


class SecretMasker:
    """
    Replaces every known secret in a text by C{***}.

    One instance serves the whole daemon: the pool, the event bus, the API's
    errors and the log all hold it, and L{learn} on reload updates it for all.
    """

    def __init__(self, servers: ServersConfig | None = None) -> None:
        self._forms: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        if servers is not None:
            self.learn(servers)

    def learn(self, servers: ServersConfig) -> None:
        """Add the secrets of C{servers} (a reloaded configuration) to those masked."""
        found = secret_forms(
            value for server in servers.servers.values() for value in server_secrets(server)
        )
        self.add(found)

    def add_values(self, values: Iterable[str]) -> None:
        """
        Mask these credentials in every encoding too: the OAuth tokens and client
        secrets the daemon obtains at run time (L{mcpx.auth.store.TokenStore.secrets}).
        """
        self.add(secret_forms(values))

    def add(self, forms: Iterable[str]) -> None:
        """Mask these exact texts too."""
        new = set(forms) - self._forms
        if not new:
            return
        self._forms |= new
        ordered = sorted(self._forms, key=lambda form: (-len(form), form))
        # A lookahead finds a secret starting at every position, even inside another
        # match, so overlapping secrets are masked as their union.
        self._pattern = re.compile("(?=(" + "|".join(map(re.escape, ordered)) + "))")

    def __bool__(self) -> bool:
        return self._pattern is not None

    def mask(self, text: str) -> str:
        """C{text} with every secret in it replaced by C{***}."""
        pattern = self._pattern
        if pattern is None or pattern.search(text) is None:
            return text
        spans: list[list[int]] = []
        for match in pattern.finditer(text):
            start, end = match.start(1), match.end(1)
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
        pieces = []
        at = 0
        for start, end in spans:
            pieces.append(text[at:start])
            pieces.append(REDACTED)
            at = end
        pieces.append(text[at:])
        return "".join(pieces)

    def mask_json(self, value: Any) -> Any:
        """
        C{value} (decoded JSON) with every string in it masked, keys included.

        Returns C{value} itself when there is nothing to mask, so the common case
        copies nothing.
        """
        if self._pattern is None:
            return value
        return self._mask_value(value)

    def _mask_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, dict):
            masked = {}
            changed = False
            for key, item in value.items():
                shown_key = self.mask(key) if isinstance(key, str) else key
                shown = self._mask_value(item)
                changed = changed or shown_key is not key or shown is not item
                masked[shown_key] = shown
            return masked if changed else value
        if isinstance(value, (list, tuple)):
            items = [self._mask_value(item) for item in value]
            if all(a is b for a, b in zip(items, value, strict=True)):
                return value
            return items
        return value
