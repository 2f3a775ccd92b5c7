# -*- test-case-name: tests.upstream.test_session -*-
"""
One session interface over both eras of MCP.

L{UpstreamSession} is what the rest of mcpx calls: list, call, read, complete,
subscribe, or send any request.  Two subclasses speak the two eras:

  - L{LegacySession} (2024-11-05 … 2025-11-25) shakes hands once with C{initialize}
    and answers the server's own requests (C{ping}, and the questions the injected
    handlers can answer).
  - L{ModernSession} (2026-07-28) has no handshake: every request restates the
    revision, the client's capabilities and its identity in C{_meta}.  The server
    asks its questions by answering C{input_required}; those rounds are resolved
    with the same handlers, or handed to the caller.

Results come back in mcpx's internal shape, the newest one: a legacy result gains
C{resultType: "complete"}, which is what the 2026-07-28 revision says a missing
C{resultType} means.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

from attrs import define, field, frozen
from twisted.internet.defer import Deferred, FirstError, gatherResults
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx._version import __version__
from mcpx.spec.revision import LEGACY_REVISIONS, NEWEST, NEWEST_LEGACY, Revision
from mcpx.upstream.channel import Channel, SessionExpired
from mcpx.upstream.handlers import NO_HANDLERS, UpstreamHandlers
from mcpx.upstream.tasks import (
    TASKS_EXTENSION,
    StatusWatcher,
    call_legacy_task,
    declares_extension,
    declares_tool_tasks,
    follow_modern_task,
    runs_as_task,
    task_support,
    without_related_task,
)
from mcpx.wire.errors import UNSUPPORTED_PROTOCOL_VERSION, RpcError
from mcpx.wire.messages import Notification, Request
from mcpx.wire.peer import NoReply, RpcPeer

CLIENT_INFO = {"name": "mcpx", "version": __version__}

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

#: The methods whose results may be C{input_required} (2026-07-28 MRTR).
ASKING_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})

#: How long opening a legacy session waits for the server's own message stream.
SERVER_STREAM_WAIT = 2.0

#: How many pages of a list mcpx follows before deciding the server is looping.
MAX_PAGES = 1000


class Era(enum.Enum):
    """How a server agrees on a revision, and over which transport shape."""

    MODERN = "modern"
    LEGACY = "legacy"
    #: 2024-11-05's HTTP+SSE transport: legacy, but over a GET stream and an endpoint.
    HTTP_SSE = "http+sse"


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


class TooManyRounds(UpstreamError):
    """A server kept answering C{input_required} past the allowed number of rounds."""


@frozen
class ServerDeclaration:
    """What a server said about itself: revision, capabilities, identity, instructions."""

    revision: Revision
    capabilities: Mapping[str, Any]
    server_info: Mapping[str, Any]
    instructions: str | None = None

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


@define(eq=False)
class UpstreamSession:
    """
    A live session with one upstream server, in either era.

    @ivar name: the server's configured name, used in every error.
    @ivar channel: the transport.
    @ivar declaration: what the server declared, once the session is open.
    """

    log = Logger()

    name: str
    channel: Channel
    clock: IReactorTime
    handlers: UpstreamHandlers = NO_HANDLERS
    lenient: bool = False
    max_rounds: int = 8
    declaration: ServerDeclaration | None = None
    peer: RpcPeer | None = None
    #: Each listed tool's C{execution.taskSupport} (C{None}: it declares none).
    _task_support: dict[str, str | None] = field(init=False, factory=dict)
    _tools_listed: bool = field(init=False, default=False)
    #: What hears the server's status notifications about a task mcpx waits on.
    _task_watchers: dict[str, StatusWatcher] = field(init=False, factory=dict)

    era: ClassVar[Era] = Era.LEGACY

    def __attrs_post_init__(self) -> None:
        if self.peer is None:
            self.peer = RpcPeer(
                self.channel.send,
                on_request=self._server_request,
                on_notification=self._server_notification,
                clock=self.clock,
                name=f"upstream {self.name!r}",
                send_request=self.channel.send_request,
                on_abandon=self.channel.abandon,
            )
            self.channel.attach(self.peer)
        else:
            # Taking over a connection another session opened (the era probe falling back).
            self.peer.handle_with(self._server_request, self._server_notification)

    @property
    def rpc(self) -> RpcPeer:
        assert self.peer is not None
        return self.peer

    # What the rest of mcpx reads

    @property
    def revision(self) -> Revision:
        if self.declaration is None:
            raise UpstreamError(self.name, "the session is not open yet")
        return self.declaration.revision

    @property
    def capabilities(self) -> Mapping[str, Any]:
        return {} if self.declaration is None else self.declaration.capabilities

    @property
    def server_info(self) -> Mapping[str, Any]:
        return {} if self.declaration is None else self.declaration.server_info

    @property
    def instructions(self) -> str | None:
        return None if self.declaration is None else self.declaration.instructions

    # Opening and closing

    async def open(self, timeout: float | None = None) -> ServerDeclaration:
        """Agree on a revision with the server; the subclass says how."""
        raise NotImplementedError

    def close(self) -> Deferred[None]:
        """End the session: fail what is outstanding, close the transport."""
        self.rpc.close(UpstreamError(self.name, "the session was closed"))
        return self.channel.close()

    # Requests

    def _send(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        timeout: float | None,
        caller: Any = None,
    ) -> Deferred[Any]:
        """Send one request as the era spells it (C{caller}: see L{call})."""
        return self.rpc.request(
            method,
            dict(params) if params is not None else None,
            timeout=timeout,
            send_cancel=self.channel.cancels_with_notification,
        )

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        caller: Any = None,
    ) -> dict[str, Any]:
        """
        Send any request and return its result in mcpx's internal shape.

        A C{input_required} result is returned as it is; see L{resolve} and L{resume}.
        Cancelling the coroutine's Deferred gives up on the request upstream.
        """
        result = await self._send(method, params, timeout, caller)
        if not isinstance(result, dict):
            raise UpstreamError(self.name, f"{method} answered with a non-object result")
        result.setdefault("resultType", "complete")
        return result

    async def call(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        resolve_inputs: bool = True,
        caller: Any = None,
    ) -> dict[str, Any]:
        """
        L{request}, with any C{input_required} rounds answered through the handlers when
        C{resolve_inputs} (up to C{max_rounds}).

        @param caller: the call this request is made for (a
            L{mcpx.questions.caller.Caller}): its questions are answered knowing it, and
            a 2026-07-28 server is declared the capabilities its C{declared} names.
        """
        result = await self.request(method, params, timeout=timeout, caller=caller)
        if not resolve_inputs:
            return result
        rounds = 0
        while is_input_required(result):
            rounds += 1
            if rounds > self.max_rounds:
                raise TooManyRounds(
                    self.name, f"{method} still asked for input after {self.max_rounds} rounds"
                )
            round_ = self.input_round(method, params, result)
            answers = await self.answer_inputs(round_, caller)
            result = await self.resume(round_, answers, timeout=timeout, caller=caller)
        if method == "tools/call" and is_task(result):
            # The server made the call a task (2026-07-28 extension): its caller still
            # gets the call's own result, once the task has one.
            return await follow_modern_task(
                self, result, params or {}, timeout=timeout, caller=caller
            )
        return result

    def input_round(
        self, method: str, params: Mapping[str, Any] | None, result: Mapping[str, Any]
    ) -> InputRound:
        base = {
            k: v
            for k, v in (params or {}).items()
            if k not in ("_meta", "inputResponses", "requestState")
        }
        requests = result.get("inputRequests") or {}
        if not isinstance(requests, Mapping):
            raise UpstreamError(self.name, "inputRequests is not an object")
        state = result.get("requestState")
        return InputRound(method, base, requests, state if isinstance(state, str) else None)

    async def answer_inputs(self, round_: InputRound, caller: Any = None) -> dict[str, Any]:
        """
        Answer every question of a round through the handlers, all at once: whoever
        answers sees the whole round together (a client is asked them in one go).
        """
        keys: list[str] = []
        asking: list[Deferred[Any]] = []
        for key, asked in round_.input_requests.items():
            method = asked.get("method") if isinstance(asked, Mapping) else None
            params = asked.get("params") if isinstance(asked, Mapping) else None
            if not isinstance(method, str):
                raise UpstreamError(self.name, f"input request {key!r} names no method")
            keys.append(key)
            asking.append(
                Deferred.fromCoroutine(
                    self._answer_input(
                        key, method, params if isinstance(params, Mapping) else {}, caller
                    )
                )
            )
        try:
            answered = await gatherResults(asking, consumeErrors=True)
        except FirstError as e:
            for pending in asking:
                pending.cancel()
            e.subFailure.raiseException()
        return dict(zip(keys, answered, strict=True))

    async def _answer_input(
        self, key: str, method: str, params: Mapping[str, Any], caller: Any
    ) -> dict[str, Any]:
        try:
            asked = without_related_task(params)
            return dict(await self.handlers.answer(method, asked, caller=caller, key=key))
        except RpcError as e:
            raise UpstreamError(
                self.name,
                f"asked {method} (input request {key!r}), which mcpx cannot answer: {e}",
            ) from None

    async def resume(
        self,
        round_: InputRound,
        input_responses: Mapping[str, Any],
        *,
        timeout: float | None = None,
        caller: Any = None,
    ) -> dict[str, Any]:
        """Send a round's request again, new id, with the answers and the exact state."""
        params: dict[str, Any] = dict(round_.params)
        params["inputResponses"] = dict(input_responses)
        if round_.request_state is not None:
            params["requestState"] = round_.request_state
        return await self.request(round_.method, params, timeout=timeout, caller=caller)

    # Typed helpers

    async def _list(self, method: str, key: str, timeout: float | None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            params = {"cursor": cursor} if cursor is not None else {}
            page = await self.request(method, params, timeout=timeout)
            found = page.get(key) or []
            if not isinstance(found, list):
                raise UpstreamError(self.name, f"{method} returned {key} that is not a list")
            items.extend(found)
            next_cursor = page.get("nextCursor")
            if not isinstance(next_cursor, str) or not next_cursor:
                return items
            if next_cursor in seen:
                raise UpstreamError(self.name, f"{method} repeated the cursor {next_cursor!r}")
            seen.add(next_cursor)
            cursor = next_cursor
        raise UpstreamError(self.name, f"{method} returned more than {MAX_PAGES} pages")

    async def list_tools(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every tool, following each C{nextCursor}."""
        return self._learn_tools(await self._list("tools/list", "tools", timeout))

    def _learn_tools(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Remember which tools run as tasks, for the calls made to them later."""
        self._task_support = {
            tool["name"]: task_support(tool)
            for tool in tools
            if isinstance(tool, dict) and isinstance(tool.get("name"), str)
        }
        self._tools_listed = True
        return tools

    async def task_support_of(self, name: str, timeout: float | None = None) -> str | None:
        """
        A tool's C{execution.taskSupport}, listing the tools first if none were listed
        on this session yet (the pool's catalogue may come from an earlier instance).
        """
        if name not in self._task_support and not self._tools_listed:
            await self.list_tools(timeout=timeout)
        return self._task_support.get(name)

    def watch_task(self, task_id: str, watcher: StatusWatcher | None) -> None:
        """Give the server's status notifications about C{task_id} to C{watcher}."""
        if watcher is None:
            self._task_watchers.pop(task_id, None)
        else:
            self._task_watchers[task_id] = watcher

    async def list_prompts(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        return await self._list("prompts/list", "prompts", timeout)

    async def list_resources(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        return await self._list("resources/list", "resources", timeout)

    async def list_resource_templates(
        self, *, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        return await self._list("resources/templates/list", "resourceTemplates", timeout)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        resolve_inputs: bool = True,
        caller: Any = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name, "arguments": dict(arguments or {})}
        if meta:
            params["_meta"] = dict(meta)
        return await self.call(
            "tools/call", params, timeout=timeout, resolve_inputs=resolve_inputs, caller=caller
        )

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
        resolve_inputs: bool = True,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments:
            params["arguments"] = dict(arguments)
        return await self.call(
            "prompts/get", params, timeout=timeout, resolve_inputs=resolve_inputs
        )

    async def read_resource(
        self, uri: str, *, timeout: float | None = None, resolve_inputs: bool = True
    ) -> dict[str, Any]:
        return await self.call(
            "resources/read", {"uri": uri}, timeout=timeout, resolve_inputs=resolve_inputs
        )

    async def complete(
        self,
        ref: Mapping[str, Any],
        argument: Mapping[str, Any],
        context: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"ref": dict(ref), "argument": dict(argument)}
        if context is not None:
            params["context"] = dict(context)
        return await self.request("completion/complete", params, timeout=timeout)

    async def subscribe(self, uri: str) -> None:
        raise NotImplementedError

    async def unsubscribe(self, uri: str) -> None:
        raise NotImplementedError

    # What the server sends us

    def _server_request(self, request: Request) -> object:
        if request.method == "ping":
            return {}
        if not self.handlers.can_answer(request.method):
            raise RpcError.method_not_found(request.method)
        return Deferred.fromCoroutine(self._answer_server(request))

    async def _answer_server(self, request: Request) -> Mapping[str, Any]:
        params = request.params if isinstance(request.params, Mapping) else {}
        return await self.handlers.answer(request.method, without_related_task(params))

    def _server_notification(self, notification: Notification) -> None:
        params = notification.params if isinstance(notification.params, Mapping) else None
        if notification.method == "notifications/tasks/status" and params is not None:
            task_id = params.get("taskId")
            watcher = self._task_watchers.get(task_id) if isinstance(task_id, str) else None
            if watcher is not None:
                watcher(params)
        self.handlers.notify(notification.method, params)


class InvalidParamHeader(ValueError):
    """A tool's C{x-mcp-header} annotations break the 2026-07-28 rules for them."""


#: RFC 9110 C{tchar}: what an C{x-mcp-header} name may be made of (C{1*tchar}).
_HEADER_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: The property types an C{x-mcp-header} may annotate (C{number} is excluded).
_HEADER_TYPES = frozenset({"string", "integer", "boolean"})
#: Keywords whose value is a subschema, or a list or map of them: an annotation under
#: one of these is not reachable through C{properties} alone, and so invalid.
_SUBSCHEMA_KEYWORDS = frozenset(
    {
        "items",
        "prefixItems",
        "contains",
        "additionalItems",
        "unevaluatedItems",
        "additionalProperties",
        "unevaluatedProperties",
        "patternProperties",
        "propertyNames",
        "dependentSchemas",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "$defs",
        "definitions",
    }
)


def param_header_paths(tool: Mapping[str, Any]) -> dict[tuple[str, ...], str]:
    """
    The C{Mcp-Param-*} headers a tool's input schema asks for, as argument path →
    header suffix (2026-07-28: a property annotated C{x-mcp-header}, reached from the
    schema root through C{properties} alone).

    @raise InvalidParamHeader: if an annotation is empty, not an RFC 9110 token, on a
        property that is not a string, integer or boolean, repeated (ignoring case), or
        somewhere other than a chain of C{properties}; the revision tells a client to
        leave such a tool out of its C{tools/list} view.
    """
    schema = tool.get("inputSchema")
    found: dict[tuple[str, ...], str] = {}
    if isinstance(schema, Mapping):
        _collect_headers(schema, (), found)
    seen: set[str] = set()
    for header in found.values():
        folded = header.lower()
        if folded in seen:
            raise InvalidParamHeader(f"x-mcp-header {header!r} is used twice (ignoring case)")
        seen.add(folded)
    return found


def _collect_headers(
    schema: Mapping[str, Any], path: tuple[str, ...], found: dict[tuple[str, ...], str]
) -> None:
    if "x-mcp-header" in schema:
        if not path:
            raise InvalidParamHeader("the x-mcp-header is on the schema root, not a property")
        found[path] = _checked_header(schema)
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, definition in properties.items():
            if isinstance(definition, Mapping):
                _collect_headers(definition, (*path, name), found)
    for keyword in _SUBSCHEMA_KEYWORDS.intersection(schema):
        if _annotated_anywhere(schema[keyword]):
            raise InvalidParamHeader(f"an x-mcp-header sits under {keyword!r}")


def _checked_header(definition: Mapping[str, Any]) -> str:
    header = definition["x-mcp-header"]
    if not isinstance(header, str) or _HEADER_TOKEN.fullmatch(header) is None:
        raise InvalidParamHeader(f"x-mcp-header {header!r} is not an HTTP header name token")
    kind = definition.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    primitive = [k for k in kinds if k != "null"]
    if not primitive or not all(k in _HEADER_TYPES for k in primitive):
        raise InvalidParamHeader(
            f"x-mcp-header {header!r} is on a property of type {kind!r}, "
            "not a string, integer or boolean"
        )
    return header


def _annotated_anywhere(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "x-mcp-header" in value or any(_annotated_anywhere(v) for v in value.values())
    if isinstance(value, list):
        return any(_annotated_anywhere(v) for v in value)
    return False


#: The requests that change nothing on the server, so may be sent again.
REPEATABLE_METHODS: Final = frozenset(
    {
        "ping",
        "tools/list",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "completion/complete",
    }
)


@define(eq=False)
class LegacySession(UpstreamSession):
    """A session that shook hands with C{initialize} (2024-11-05 … 2025-11-25)."""

    era: ClassVar[Era] = Era.LEGACY
    _subscriptions: set[str] = field(init=False, factory=set)
    #: The tools the server annotated C{idempotentHint: true} when last listed.
    _idempotent_tools: frozenset[str] = field(init=False, factory=frozenset)

    async def open(self, timeout: float | None = None) -> ServerDeclaration:
        """
        C{initialize} offering the newest legacy revision, then C{notifications/initialized}.

        @raise UpstreamError: if the server answers with a revision mcpx does not speak.
        """
        self.channel.negotiated.modern = False
        self.channel.negotiated.revision = None
        offered = NEWEST_LEGACY
        result = await self.rpc.request(
            "initialize",
            {
                "protocolVersion": offered.value,
                "capabilities": self.handlers.client_capabilities(offered),
                "clientInfo": dict(CLIENT_INFO),
            },
            timeout=timeout,
            send_cancel=False,
        )
        if not isinstance(result, dict):
            raise UpstreamError(self.name, "initialize answered with a non-object result")
        answered = result.get("protocolVersion")
        revision = Revision.find(answered)
        if revision is None or revision not in LEGACY_REVISIONS:
            speaks = ", ".join(r.value for r in LEGACY_REVISIONS)
            raise UpstreamError(
                self.name,
                f"initialize answered protocol version {answered!r}, which mcpx cannot use "
                f"with a handshake (it speaks {speaks})",
            )
        capabilities = result.get("capabilities")
        server_info = result.get("serverInfo")
        instructions = result.get("instructions")
        self.declaration = ServerDeclaration(
            revision=revision,
            capabilities=capabilities if isinstance(capabilities, dict) else {},
            server_info=server_info if isinstance(server_info, dict) else {},
            instructions=instructions if isinstance(instructions, str) else None,
        )
        self.channel.negotiated.revision = revision
        self.rpc.allow_batches = revision is Revision.V2025_03_26
        self.rpc.notify("notifications/initialized")
        ready = self.channel.initialized()
        if ready is not None:
            # Bounded: a server slow to answer its GET stream must not hold the session.
            ready.addTimeout(SERVER_STREAM_WAIT, self.clock)
            try:
                await ready
            except DeferredTimeout:
                self.log.info(
                    "upstream {server}: its stream for server messages is slow to open",
                    server=self.name,
                )
        return self.declaration

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        caller: Any = None,
    ) -> dict[str, Any]:
        """
        As L{UpstreamSession.request}; a session the server forgot is opened again once,
        and the request sent again only if the server cannot have started it or it is
        safe to repeat (L{repeatable}).

        @raise SessionExpired: (with C{started}) the server forgot the session after it
            had accepted the request, which is not safe to repeat: whether it ran is
            unknown.  The session is open again for the next request.
        """
        try:
            return await UpstreamSession.request(self, method, params, timeout=timeout)
        except SessionExpired as e:
            self.log.info(
                "upstream {server}: session expired; initializing again", server=self.name
            )
            self.channel.reset_session()
            await self.open(timeout=timeout)
            for uri in sorted(self._subscriptions):
                await UpstreamSession.request(self, "resources/subscribe", {"uri": uri})
            if e.started and not self.repeatable(method, params):
                raise
            return await UpstreamSession.request(self, method, params, timeout=timeout)

    def repeatable(self, method: str, params: Mapping[str, Any] | None) -> bool:
        """
        Whether sending this request twice does no harm: a listing, a read, a ping, or
        a call of a tool the server annotated C{idempotentHint: true}.
        """
        if method in REPEATABLE_METHODS:
            return True
        if method == "tools/call" and params is not None:
            return params.get("name") in self._idempotent_tools
        return False

    async def list_tools(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every tool, remembering which the server says are safe to call twice."""
        tools = await UpstreamSession.list_tools(self, timeout=timeout)
        self._idempotent_tools = frozenset(
            tool["name"]
            for tool in tools
            if isinstance(tool, dict)
            and isinstance(tool.get("name"), str)
            and isinstance(tool.get("annotations"), dict)
            and tool["annotations"].get("idempotentHint") is True
        )
        return tools

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        resolve_inputs: bool = True,
        caller: Any = None,
    ) -> dict[str, Any]:
        """
        As L{UpstreamSession.call_tool}; a tool that must run as a task (or may, and
        C{caller} wants one) is called as a 2025-11-25 task and its result awaited.
        """
        if declares_tool_tasks(self.capabilities):
            support = await self.task_support_of(name, timeout)
            if runs_as_task(support, bool(getattr(caller, "wants_task", False))):
                params: dict[str, Any] = {"name": name, "arguments": dict(arguments or {})}
                if meta:
                    params["_meta"] = dict(meta)
                return await call_legacy_task(
                    self, params, timeout=timeout, caller=caller, watch=self.watch_task
                )
        return await UpstreamSession.call_tool(
            self,
            name,
            arguments,
            meta=meta,
            timeout=timeout,
            resolve_inputs=resolve_inputs,
            caller=caller,
        )

    async def subscribe(self, uri: str) -> None:
        await self.request("resources/subscribe", {"uri": uri})
        self._subscriptions.add(uri)

    async def unsubscribe(self, uri: str) -> None:
        self._subscriptions.discard(uri)
        await self.request("resources/unsubscribe", {"uri": uri})


@define(eq=False)
class ModernSession(UpstreamSession):
    """
    A 2026-07-28 session: no handshake, the revision restated on every request, and
    notifications only on a C{subscriptions/listen} stream.
    """

    era: ClassVar[Era] = Era.MODERN
    #: Seconds to wait before reopening a listen stream the server ended.
    listen_retry: ClassVar[float] = 1.0
    _subscriptions: set[str] = field(init=False, factory=set)
    _listen: Deferred[Any] | None = field(init=False, default=None)
    _reopen: IDelayedCall | None = field(init=False, default=None)
    _listen_filter: dict[str, Any] = field(init=False, factory=dict)
    _closing: bool = field(init=False, default=False)
    acknowledged: Mapping[str, Any] | None = field(init=False, default=None)
    _tool_headers: dict[str, dict[tuple[str, ...], str]] = field(init=False, factory=dict)

    def _meta(self, meta: Any, caller: Any = None, *, tasks: bool = False) -> dict[str, Any]:
        merged = dict(meta) if isinstance(meta, Mapping) else {}
        merged[META_VERSION] = NEWEST.value
        declared = getattr(caller, "declared", None) if caller is not None else None
        capabilities = (
            dict(declared) if declared is not None else self.handlers.client_capabilities(NEWEST)
        )
        if tasks:
            # mcpx follows any task the server makes of a call, whoever the caller is.
            extensions = capabilities.get("extensions")
            capabilities["extensions"] = {
                **(extensions if isinstance(extensions, Mapping) else {}),
                TASKS_EXTENSION: {},
            }
        merged[META_CAPABILITIES] = capabilities
        merged[META_CLIENT_INFO] = CLIENT_INFO
        return merged

    def _send(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        timeout: float | None,
        caller: Any = None,
    ) -> Deferred[Any]:
        spelled = dict(params) if params is not None else {}
        calling = method == "tools/call"
        spelled["_meta"] = self._meta(
            spelled.get("_meta"),
            caller,
            tasks=calling and declares_extension(self.capabilities),
        )
        if calling:
            self._stage_param_headers(spelled)
        return self.rpc.request(
            method,
            spelled,
            timeout=timeout,
            send_cancel=self.channel.cancels_with_notification,
        )

    async def list_tools(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """
        Every tool, following each C{nextCursor}, without the tools whose
        C{x-mcp-header} annotations are invalid: 2026-07-28 tells a client to leave
        those out, so one malformed definition costs only itself.
        """
        listed = await self._list("tools/list", "tools", timeout)
        tools: list[dict[str, Any]] = []
        headers: dict[str, dict[tuple[str, ...], str]] = {}
        for tool in listed:
            if not isinstance(tool, dict):
                continue
            name = tool.get("name")
            try:
                wanted = param_header_paths(tool)
            except InvalidParamHeader as e:
                self.log.warn(
                    "upstream {server}: leaving out the tool {tool!r}: {why}",
                    server=self.name,
                    tool=name,
                    why=str(e),
                )
                continue
            tools.append(tool)
            if wanted and isinstance(name, str):
                headers[name] = wanted
        self._tool_headers = headers
        return self._learn_tools(tools)

    def _stage_param_headers(self, params: Mapping[str, Any]) -> None:
        name = params.get("name")
        wanted = self._tool_headers.get(name) if isinstance(name, str) else None
        arguments = params.get("arguments")
        if not wanted or not isinstance(arguments, Mapping):
            self.channel.negotiated.param_headers = {}
            return
        values: dict[str, str] = {}
        for path, header in wanted.items():
            value: Any = arguments
            for key in path:
                value = value.get(key) if isinstance(value, Mapping) else None
            if value is not None:
                values[header] = _header_value(value)
        assert isinstance(name, str)
        self.channel.negotiated.param_headers = {name: values}

    async def open(self, timeout: float | None = None) -> ServerDeclaration:
        """
        C{server/discover}: read C{supportedVersions}, capabilities, instructions and the
        server's identity.  A C{-32022} naming 2026-07-28 among the supported versions is
        tried once more; one that does not is refused with what the server speaks.
        """
        self.channel.negotiated.modern = True
        self.channel.negotiated.revision = NEWEST
        try:
            result = await self.request("server/discover", {}, timeout=timeout)
        except RpcError as e:
            if e.code != UNSUPPORTED_PROTOCOL_VERSION:
                raise
            supported = _supported_versions(e.data)
            if NEWEST.value not in supported:
                raise NotModern(
                    self.name,
                    f"the server does not speak {NEWEST.value}; it supports "
                    + (", ".join(supported) or "nothing it named"),
                    supported,
                ) from None
            result = await self.request("server/discover", {}, timeout=timeout)
        return self._declare(result)

    def _declare(self, result: Mapping[str, Any]) -> ServerDeclaration:
        supported = result.get("supportedVersions")
        if not isinstance(supported, list) or NEWEST.value not in supported:
            raise NotModern(
                self.name,
                f"server/discover lists supportedVersions {supported!r}, without {NEWEST.value}",
                [v for v in supported if isinstance(v, str)] if isinstance(supported, list) else (),
            )
        meta = result.get("_meta")
        server_info = meta.get(META_SERVER_INFO) if isinstance(meta, Mapping) else None
        capabilities = result.get("capabilities")
        instructions = result.get("instructions")
        self.declaration = ServerDeclaration(
            revision=NEWEST,
            capabilities=capabilities if isinstance(capabilities, dict) else {},
            server_info=server_info if isinstance(server_info, dict) else {},
            instructions=instructions if isinstance(instructions, str) else None,
        )
        self._update_listen()
        return self.declaration

    def close(self) -> Deferred[None]:
        self._closing = True
        if self._reopen is not None and self._reopen.active():
            self._reopen.cancel()
        self._reopen = None
        if self._listen is not None:
            self._listen.cancel()
            self._listen = None
        return UpstreamSession.close(self)

    def _server_request(self, request: Request) -> object:
        if self.lenient:
            return UpstreamSession._server_request(self, request)
        # 2026-07-28 has no server-to-client requests: a client answering one would be
        # talking a protocol that does not exist, so it is logged and left unanswered.
        self.log.warn(
            "upstream {server} sent a {method} request, which 2026-07-28 does not have; "
            "not answered",
            server=self.name,
            method=request.method,
        )
        raise NoReply()

    def _server_notification(self, notification: Notification) -> None:
        if notification.method == "notifications/subscriptions/acknowledged":
            params = notification.params if isinstance(notification.params, Mapping) else {}
            granted = params.get("notifications")
            self.acknowledged = granted if isinstance(granted, Mapping) else {}
            return
        UpstreamSession._server_notification(self, notification)

    # subscriptions/listen upkeep

    def _wanted_filter(self) -> dict[str, Any]:
        declaration = self.declaration
        wanted: dict[str, Any] = {}
        if declaration is None:
            return wanted
        if declaration.declares("tools.listChanged"):
            wanted["toolsListChanged"] = True
        if declaration.declares("prompts.listChanged"):
            wanted["promptsListChanged"] = True
        if declaration.declares("resources.listChanged"):
            wanted["resourcesListChanged"] = True
        if self._subscriptions and declaration.declares("resources.subscribe"):
            wanted["resourceSubscriptions"] = sorted(self._subscriptions)
        return wanted

    def _update_listen(self) -> None:
        """Open, reopen or close the listen stream so it asks for what is wanted now."""
        self._reopen = None
        if self._closing:
            return
        wanted = self._wanted_filter()
        if wanted == self._listen_filter and self._listen is not None:
            return
        previous, self._listen = self._listen, None
        self._listen_filter = wanted
        if previous is not None:
            previous.cancel()
        if not wanted:
            return
        self.acknowledged = None
        listening = Deferred.fromCoroutine(
            self.request("subscriptions/listen", {"notifications": wanted})
        )
        self._listen = listening
        listening.addBoth(self._listen_ended, listening)

    def _listen_ended(self, outcome: object, listening: Deferred[Any]) -> None:
        if self._listen is not listening:
            return None  # replaced or cancelled on purpose
        self._listen = None
        self._listen_filter = {}
        if self._closing:
            return None
        if isinstance(outcome, Failure):
            self.log.warn(
                "upstream {server}: subscriptions/listen ended: {why}; reopening",
                server=self.name,
                why=outcome.getErrorMessage(),
            )
        # Reopened after a pause either way: a server that ends every stream at once
        # must not be answered with a tight loop of new ones.
        if self._reopen is None or not self._reopen.active():
            self._reopen = self.clock.callLater(self.listen_retry, self._update_listen)
        return None

    async def subscribe(self, uri: str) -> None:
        self._subscriptions.add(uri)
        self._update_listen()

    async def unsubscribe(self, uri: str) -> None:
        self._subscriptions.discard(uri)
        self._update_listen()


def _supported_versions(data: Any) -> list[str]:
    supported = data.get("supported") if isinstance(data, Mapping) else None
    if not isinstance(supported, Sequence) or isinstance(supported, str):
        return []
    return [v for v in supported if isinstance(v, str)]


def _header_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
