# -*- test-case-name: tests.daemon.test_ops -*-
"""
The warm pool as the floors above it see it: a Protocol, so that the operations, the
MCP server and the script runner depend on what they call and not on L{Pool}'s
innards, and the daemon can hand them the pool wrapped by its policies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypedDict, Unpack

from mcpx.call import Call
from mcpx.pool.progress import ProgressSink
from mcpx.pool.status import ReloadReport, ServerStatus
from mcpx.settings.resolve import Settings
from mcpx.settings.servers import ServersConfig
from mcpx.upstream.records import ServerDeclaration


class RequestOptions(TypedDict, total=False):
    """
    How a request is sent, besides where and what (L{mcpx.pool.Pool.request}); each
    may be left out.

    @ivar client: the caller's identity, which picks its instance (default C{""}).
    @ivar timeout: a bound shorter than C{pool.callTimeout}; a longer one is clamped.
    @ivar call: the call it is made for (L{mcpx.call.Call}): the
        server's questions may be put to that call's client.
    """

    client: str
    timeout: float | None
    call: Call | None


class CallOptions(RequestOptions, total=False):
    """
    How a tool call is made (L{mcpx.pool.Pool.call_tool}): a request's options, and
    two of its own.

    @ivar meta: the C{_meta} to send with it (the pool adds its progress token).
    @ivar on_progress: called with the params of each C{notifications/progress} the
        server sends about the call.
    """

    meta: Mapping[str, Any] | None
    on_progress: ProgressSink | None


class DeclaringSession(Protocol):
    """The part of an upstream session the operations read: what the server declared."""

    @property
    def declaration(self) -> ServerDeclaration | None: ...


class PoolInterface(Protocol):
    """
    The warm pool as those above it use it: the operations, the MCP server's
    pass-through and a script run's calls.  L{mcpx.pool.Pool} is one; so is the pool
    as the daemon guards it (L{mcpx.policy.guard}), and a fake in tests.
    """

    async def session(self, server: str, client: str = "") -> DeclaringSession: ...

    async def call_tool(
        self, server: str, tool: str, arguments: Mapping[str, Any], **options: Unpack[CallOptions]
    ) -> dict[str, Any]: ...

    async def request(
        self, server: str, method: str, params: Mapping[str, Any], **options: Unpack[RequestOptions]
    ) -> dict[str, Any]: ...

    async def tools(self, server: str, *, client: str = "") -> list[dict[str, Any]]: ...
    async def prompts(self, server: str, *, client: str = "") -> list[dict[str, Any]]: ...
    async def resources(self, server: str, *, client: str = "") -> list[dict[str, Any]]: ...
    async def templates(self, server: str, *, client: str = "") -> list[dict[str, Any]]: ...
    def cached_catalogue(
        self, server: str, kind: str, *, client: str = ""
    ) -> list[dict[str, Any]] | None: ...
    def status(self) -> Sequence[ServerStatus]: ...
    def probe_wait(self, server: str) -> float: ...
    def running_declaration(self, server: str, client: str = "") -> ServerDeclaration | None: ...
    def notify(self, server: str, client: str, method: str) -> int: ...
    async def restart(self, server: str, *, principal: str | None = None) -> None: ...
    async def reload(self, servers: ServersConfig) -> ReloadReport: ...
    def retune(self, settings: Settings) -> None: ...
