# -*- test-case-name: tests.auth.test_store -*-
"""
Keeping a server's access token usable: refresh before expiry, one refresh at a time
per key, and failures told apart.

A refresh that fails on the network keeps the tokens (the network comes back; the
refresh token is still good) and the next use tries again after a back-off; a refusal
that means the grant or client is gone (C{invalid_grant}, C{invalid_client}) marks the
entry "needs sign-in", and every call to the server says how to sign in.
"""

from __future__ import annotations

from typing import Final

from attrs import evolve
from twisted.internet.defer import DeferredLock
from twisted.internet.interfaces import IReactorTime

from mcpx.auth.flow import Discovery, GrantRefused, NetworkError, OAuthClient
from mcpx.auth.store import Key, TokenStore

#: Refresh this many seconds before the access token expires.
EXPIRY_LEEWAY: Final = 60.0

#: The longest wait between refresh attempts after network failures, in seconds.
MAX_BACKOFF: Final = 300.0


def cure(server: str, owner: bool = True) -> str:
    """
    What signs C{server} in again: for the owner's sign-in, C{mcpx auth login}; for an
    access token's subject's own, a sign-in of its own.
    """
    if owner:
        return f"run `mcpx auth login {server}`"
    return (
        f"sign in to it yourself: through your host, or POST /v1/auth/{server}/begin with "
        "your access token"
    )


class NeedsSignIn(Exception):
    """
    The server has no usable tokens; the message names what cures it: for the owner's
    sign-in, C{mcpx auth login}; for an access token's subject's own, a sign-in of its
    own (offered through its host, or C{POST /v1/auth/{name}/begin} with its token).

    @ivar owner: whether the sign-in missing is the owner's.
    """

    def __init__(self, server: str, why: str = "", *, owner: bool = True) -> None:
        super().__init__(
            f"{server} needs a sign-in{': ' + why if why else ''}; {cure(server, owner)}"
        )
        self.server = server
        self.owner = owner


class Refresher:
    """Access tokens from the store, refreshed when due."""

    def __init__(
        self,
        store: TokenStore,
        client: OAuthClient,
        clock: IReactorTime,
        *,
        leeway: float = EXPIRY_LEEWAY,
    ) -> None:
        self.store = store
        self.client = client
        self.clock = clock
        self.leeway = leeway
        self._locks: dict[Key, DeferredLock] = {}
        self._failures: dict[Key, int] = {}
        self._not_before: dict[Key, float] = {}

    def _due(self, expires_at: float | None) -> bool:
        return expires_at is not None and expires_at - self.leeway <= self.clock.seconds()

    async def access_token(self, key: Key, discovery: Discovery) -> str:
        """A usable access token for C{key}, refreshing it first when it is due."""
        entry = self.store.get(key)
        if entry is None or entry.tokens is None:
            raise NeedsSignIn(key.server)
        if entry.needs_sign_in:
            raise NeedsSignIn(key.server, "its authorization was revoked or has expired")
        if not self._due(entry.tokens.expires_at):
            return entry.tokens.access_token
        lock = self._locks.setdefault(key, DeferredLock())
        await lock.acquire()
        try:
            return await self._refresh(key, discovery)
        finally:
            lock.release()

    async def _refresh(self, key: Key, discovery: Discovery) -> str:
        entry = self.store.get(key)
        if entry is None or entry.tokens is None or entry.needs_sign_in:
            raise NeedsSignIn(key.server)
        tokens = entry.tokens
        # Another caller refreshed while this one waited for the lock.
        if not self._due(tokens.expires_at):
            return tokens.access_token
        still_valid = tokens.expires_at is not None and tokens.expires_at > self.clock.seconds()
        if tokens.refresh_token is None or entry.registration is None:
            if still_valid:
                return tokens.access_token
            self.store.mark_needs_sign_in(key)
            raise NeedsSignIn(key.server, "its access token expired and cannot be refreshed")
        if self.clock.seconds() < self._not_before.get(key, 0.0):
            if still_valid:
                return tokens.access_token
            raise NetworkError(f"refreshing the token of {key.server} failed; retrying later")
        try:
            fresh = await self.client.refresh(discovery, entry.registration, tokens)
        except NetworkError:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            self._not_before[key] = self.clock.seconds() + min(2.0**failures, MAX_BACKOFF)
            if still_valid:
                return tokens.access_token
            raise
        except GrantRefused as refused:
            if refused.needs_sign_in:
                if refused.error == "invalid_client":
                    # The client itself is gone: the next sign-in registers afresh
                    # instead of failing the same way.
                    self.store.put(evolve(entry, registration=None))
                self.store.mark_needs_sign_in(key)
                raise NeedsSignIn(key.server, str(refused)) from refused
            raise
        self._failures.pop(key, None)
        self._not_before.pop(key, None)
        self.store.put(evolve(entry, tokens=fresh))
        return fresh.access_token
