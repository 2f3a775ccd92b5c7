# -*- test-case-name: tests.policy.test_sampling -*-
"""
A server's C{sampling/createMessage} under the user's control, before the relay.

C{sampling.mode} C{deny} refuses it; C{confirm} asks the user through the relay first
(the host then shows it to its own user too, as the specification asks); C{allow}
passes it to the host.  Whatever the mode, C{maxTokens} is capped at
C{sampling.maxTokens}, an C{includeContext} other than C{"none"} is refused unless
C{sampling.includeContext} is true (a server must not read other servers' context
through the host), and the host's result is held against the C{CreateMessageResult}
schema before it goes upstream.  Each request and its outcome is an event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from mcpx.call import Call
from mcpx.settings.server_policy import SamplingMode, ServerPolicy
from mcpx.spec.questions import SAMPLE
from mcpx.spec.revision import Revision
from mcpx.spec.schemas import violations
from mcpx.upstream.handlers import UpstreamHandlers
from mcpx.wire.errors import INTERNAL_ERROR, INVALID_PARAMS, RpcError

#: The JSON-RPC code of a sampling request the user (or their policy) refused, as the
#: specification's examples spell "user rejected".
USER_REJECTED: Final = -1

Relayed = Callable[
    [str, Mapping[str, Any], "Call | None", "str | None"], Awaitable[Mapping[str, Any]]
]
#: Asks the user (server, scope key, call or C{None} for the relay to find, question
#: params): whether they said yes.
AskUser = Callable[[str, str, "Call | None", Mapping[str, Any]], Awaitable[bool]]
Publish = Callable[..., None]


def _messages_text(params: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for message in params.get("messages") or ():
        content = message.get("content") if isinstance(message, Mapping) else None
        blocks = content if isinstance(content, list) else [content]
        for block in blocks:
            if isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
    text = " / ".join(parts)
    return text if len(text) <= 1000 else text[:1000] + "…"


def sampling_question(server: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The form elicitation that asks the user whether a server may sample."""
    return {
        "mode": "form",
        "message": (
            f"server {server!r} asks the model for up to {params.get('maxTokens')} tokens "
            f"(via mcpx): {_messages_text(params)!r}. Allow it?"
        ),
        "requestedSchema": {
            "type": "object",
            "properties": {"confirm": {"type": "boolean", "title": "Allow this sampling"}},
            "required": ["confirm"],
        },
    }


def bad_result(result: object) -> list[str]:
    """How a host's sampling result breaks C{CreateMessageResult} at every revision."""
    newest: list[str] = []
    for revision in (Revision.V2025_11_25, Revision.V2025_06_18, Revision.V2024_11_05):
        found = violations(result, revision, "CreateMessageResult", strict=False)
        if not found:
            return []
        newest = newest or found
    return newest


class SamplingGuard:
    """Puts one server's sampling requests through its policy."""

    def __init__(
        self,
        policy_of: Callable[[str], ServerPolicy],
        ask: AskUser,
        publish: Publish,
    ) -> None:
        self._policy_of = policy_of
        self._ask = ask
        self._publish = publish

    def guarded(self, server: str, scope_key: str, handlers: UpstreamHandlers) -> UpstreamHandlers:
        """C{handlers} with their relay's sampling requests through the policy."""
        relay = handlers.relay
        if relay is None:
            return handlers

        async def guarded_relay(
            method: str, params: Mapping[str, Any], call: Call | None, key: str | None
        ) -> Mapping[str, Any]:
            if method != SAMPLE:
                return await relay(method, params, call, key)
            return await self.sample(server, scope_key, params, call=call, key=key, relay=relay)

        return UpstreamHandlers(relay=guarded_relay, notification=handlers.notification)

    async def sample(
        self,
        server: str,
        scope_key: str,
        params: Mapping[str, Any],
        *,
        call: Call | None,
        key: str | None,
        relay: Relayed,
    ) -> Mapping[str, Any]:
        """
        One sampling request through C{server}'s policy.

        @raise RpcError: C{-1} when denied or declined, C{-32602} for context the
            policy does not allow, C{-32603} for a host result that breaks the schema.
        """
        policy = self._policy_of(server)
        asked = params.get("maxTokens")
        self._publish(
            "sampling.requested", server, mode=policy.sampling_mode.value, max_tokens=asked
        )

        def refuse(code: int, outcome: str, message: str) -> RpcError:
            self._publish("sampling.refused", server, outcome=outcome)
            return RpcError(code, message, {"server": server, "setting": outcome})

        if policy.sampling_mode is SamplingMode.DENY:
            raise refuse(
                USER_REJECTED,
                "sampling.mode",
                f"mcpx refuses sampling for server {server!r}: its sampling.mode is deny",
            )
        include = params.get("includeContext")
        if include not in (None, "none") and not policy.sampling_include_context:
            raise refuse(
                INVALID_PARAMS,
                "sampling.includeContext",
                f"mcpx refuses includeContext {include!r} for server {server!r}: a server may "
                "not read other context through the host unless its sampling.includeContext "
                "is true",
            )
        cap = policy.sampling_max_tokens
        if cap is not None and (type(asked) is not int or asked > cap):
            params = {**params, "maxTokens": cap}
        # A handshake-era server asks on its session, with no call named: the relay
        # finds whose call it is (and so whom to ask), as it does for the request itself.
        if policy.sampling_mode is SamplingMode.CONFIRM and not await self._ask(
            server, scope_key, call, sampling_question(server, params)
        ):
            raise refuse(
                USER_REJECTED,
                "sampling.mode",
                f"the user declined server {server!r}'s sampling request "
                "(sampling.mode is confirm)",
            )
        try:
            result = await relay(SAMPLE, params, call, key)
        except Exception as reason:
            # The host declined, erred or could not be reached: counted, then told to
            # the server as it was.
            self._publish("sampling.failed", server, reason=type(reason).__name__)
            raise
        problems = bad_result(result)
        if problems:
            raise refuse(
                INTERNAL_ERROR,
                "result",
                f"the host's sampling result for server {server!r} is not a valid "
                f"CreateMessageResult: {problems[0]}",
            )
        self._publish("sampling.answered", server, max_tokens=params.get("maxTokens"))
        return result
