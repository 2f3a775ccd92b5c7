# -*- test-case-name: tests.upstream.test_session -*-
"""
What an upstream session hands back and raises, in either era (L{mcpx.spec.revision.Era}):
the L{ServerDeclaration} the server made, a 2026-07-28 L{InputRound}, and the
L{UpstreamError}s that name the server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attrs import frozen

from mcpx._version import __version__
from mcpx.spec.revision import Revision

CLIENT_INFO = {"name": "mcpx", "version": __version__}


class UpstreamError(Exception):
    """Something about an upstream server that its caller must hear, naming the server."""

    def __init__(self, server: str, message: str) -> None:
        self.server = server
        super().__init__(f"upstream {server!r}: {message}")


class NotModern(UpstreamError):
    """
    The server answered the modern probe, but does not speak 2026-07-28: the
    versions it named (if any) are in C{supported}.
    """

    def __init__(self, server: str, message: str, supported: Sequence[str] = ()) -> None:
        super().__init__(server, message)
        self.supported = tuple(supported)


class AnsweredModern(UpstreamError):
    """
    The server answered C{initialize} naming a revision without a handshake (2026-07-28):
    it is a modern server that did not answer the probe in time, not a legacy one.
    """


class AnsweredWithoutRevision(UpstreamError):
    """
    The server answered C{initialize} with a result that names no revision at all: no
    server of a handshake revision does that, while a 2026-07-28 server, which has no
    C{initialize}, may answer it with anything.
    """


class TooManyRounds(UpstreamError):
    """A server kept answering C{input_required} past the allowed number of rounds."""


@frozen
class ServerDeclaration:
    """What a server said about itself: revision, capabilities, identity, instructions."""

    revision: Revision
    capabilities: Mapping[str, Any]
    server_info: Mapping[str, Any]
    instructions: str | None = None

    @classmethod
    def read(
        cls, revision: Revision, result: Mapping[str, Any], server_info: object
    ) -> ServerDeclaration:
        """
        What an C{initialize} or C{server/discover} result declares (C{server_info} is
        where that revision puts the server's identity); a part of the wrong type counts
        as not given.
        """
        capabilities = result.get("capabilities")
        instructions = result.get("instructions")
        return cls(
            revision=revision,
            capabilities=capabilities if isinstance(capabilities, dict) else {},
            server_info=server_info if isinstance(server_info, dict) else {},
            instructions=instructions if isinstance(instructions, str) else None,
        )

    def declares(self, path: str) -> bool:
        """Whether a dotted capability (C{"resources.subscribe"}) is declared (and truthy)."""
        node: Any = self.capabilities
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return False
            node = node[part]
        return node is not None and node is not False


@frozen
class InputRound:
    """
    A 2026-07-28 server's C{input_required} answer: what it asks, and what to send back.

    @ivar method: the request that was answered so.
    @ivar params: that request's parameters, without C{_meta}, C{inputResponses} and
        C{requestState} (each round is sent afresh with a new id).
    @ivar input_requests: the questions by key, each C{{"method", "params"}}.
    @ivar request_state: the opaque state to hand back exactly, if the server gave one.
    """

    method: str
    params: Mapping[str, Any]
    input_requests: Mapping[str, Mapping[str, Any]]
    request_state: str | None


def is_input_required(result: Mapping[str, Any]) -> bool:
    return result.get("resultType") == "input_required"


def is_task(result: Mapping[str, Any]) -> bool:
    """Whether a result is a 2026-07-28 extension's C{CreateTaskResult}."""
    return result.get("resultType") == "task"
