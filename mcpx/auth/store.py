# -*- test-case-name: tests.auth.test_store -*-
"""
Tokens and registered clients, kept in the state directory.

One file, C{oauth-tokens.json}, mode 0600, written whole to a temporary file and
renamed, so a crash leaves the old file or the new one.  Entries are keyed by
(server, issuer, resource, principal): one server's tokens are never offered to another,
a server that moves to another authorization server gets a fresh registration there,
and each principal (the owner, each access token's subject) has its own sign-in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from attrs import evolve, frozen

from mcpx.auth.caller import OWNER
from mcpx.auth.flow import Registration, Tokens

FILE_NAME: Final = "oauth-tokens.json"


@frozen
class Key:
    """
    Whose tokens: a server entry, at one issuer, for one resource, signed in by one
    principal (L{OWNER}, or the caller identity of an access token's subject).
    """

    server: str
    issuer: str
    resource: str
    principal: str = OWNER


@frozen(repr=False)
class Entry:
    """
    What is known about signing in to one server at one issuer.

    @ivar needs_sign_in: the tokens or client were refused for good; C{mcpx auth login}
        is the cure.
    @ivar required_scopes: the scopes the next sign-in asks for, after the server
        refused the token for lack of scope (a step-up); empty otherwise.
    """

    key: Key
    registration: Registration | None = None
    tokens: Tokens | None = None
    needs_sign_in: bool = False
    required_scopes: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"Entry({self.key!r}, signed_in={self.tokens is not None})"


def path_in(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


class TokenStore:
    """The entries, in memory and on disk (C{path} C{None}: in memory only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[Key, Entry] = {}
        if path is not None and path.exists():
            self._entries = {entry.key: entry for entry in _load(path)}

    def entries(self, server: str | None = None, principal: str | None = None) -> list[Entry]:
        """
        The entries of one server (all with C{None}), of one principal (every one's with
        C{None}), in a stable order.
        """
        found = [
            e
            for e in self._entries.values()
            if (server is None or e.key.server == server)
            and (principal is None or e.key.principal == principal)
        ]
        return sorted(
            found, key=lambda e: (e.key.server, e.key.principal, e.key.issuer, e.key.resource)
        )

    def get(self, key: Key) -> Entry | None:
        return self._entries.get(key)

    def put(self, entry: Entry) -> None:
        self._entries[entry.key] = entry
        self._save()

    def mark_needs_sign_in(self, key: Key) -> None:
        entry = self._entries.get(key)
        if entry is not None and not entry.needs_sign_in:
            self.put(evolve(entry, needs_sign_in=True))

    def forget(self, server: str, principal: str | None = None) -> list[Entry]:
        """
        Drop every entry of C{server} (only C{principal}'s when given); the dropped
        ones, to revoke their tokens.
        """
        dropped = self.entries(server, principal)
        for entry in dropped:
            del self._entries[entry.key]
        if dropped:
            self._save()
        return dropped

    def secrets(self) -> Iterator[str]:
        """Every token and client secret held, for the secret masker."""
        for entry in self._entries.values():
            if entry.tokens is not None:
                yield entry.tokens.access_token
                if entry.tokens.refresh_token is not None:
                    yield entry.tokens.refresh_token
            if entry.registration is not None and entry.registration.client_secret is not None:
                yield entry.registration.client_secret

    def _save(self) -> None:
        if self.path is None:
            return
        document = {"version": 1, "entries": [_dump(e) for e in self.entries()]}
        temporary = self.path.with_name(self.path.name + ".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump(document, file)
        os.chmod(temporary, 0o600)
        os.replace(temporary, self.path)


def _dump(entry: Entry) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "server": entry.key.server,
        "issuer": entry.key.issuer,
        "resource": entry.key.resource,
        "needsSignIn": entry.needs_sign_in,
    }
    if entry.key.principal != OWNER:
        shown["principal"] = entry.key.principal
    if entry.required_scopes:
        shown["requiredScopes"] = list(entry.required_scopes)
    if entry.registration is not None:
        r = entry.registration
        shown["client"] = {
            "issuer": r.issuer,
            "clientId": r.client_id,
            "clientSecret": r.client_secret,
            "authMethod": r.auth_method,
        }
    if entry.tokens is not None:
        t = entry.tokens
        shown["tokens"] = {
            "accessToken": t.access_token,
            "refreshToken": t.refresh_token,
            "expiresAt": t.expires_at,
            "scopes": list(t.scopes),
            "tokenType": t.token_type,
        }
    return shown


def _load(path: Path) -> Iterator[Entry]:
    """The entries of a store file; a file that is not one is ignored, not fatal."""
    try:
        document = json.loads(path.read_text())
        raw_entries = document["entries"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    for raw in raw_entries:
        try:
            key = Key(
                str(raw["server"]),
                str(raw["issuer"]),
                str(raw["resource"]),
                str(raw.get("principal", OWNER)),
            )
            client = raw.get("client")
            tokens = raw.get("tokens")
            yield Entry(
                key,
                registration=None
                if client is None
                else Registration(
                    client["issuer"],
                    client["clientId"],
                    client.get("clientSecret"),
                    client["authMethod"],
                ),
                tokens=None
                if tokens is None
                else Tokens(
                    tokens["accessToken"],
                    tokens.get("refreshToken"),
                    tokens.get("expiresAt"),
                    tuple(tokens.get("scopes", ())),
                    tokens.get("tokenType", "Bearer"),
                ),
                needs_sign_in=bool(raw.get("needsSignIn", False)),
                required_scopes=tuple(str(s) for s in raw.get("requiredScopes", ())),
            )
        except (KeyError, TypeError, AttributeError):
            continue
