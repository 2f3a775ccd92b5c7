# -*- test-case-name: tests.upstream.test_session -*-
"""
One session interface over both eras of MCP.

L{UpstreamSession} is what the rest of mcpx calls: list, call, read, complete,
subscribe, or send any request.  Two subclasses speak the two eras:

  - L{mcpx.upstream.legacy_session.LegacySession} (2024-11-05 … 2025-11-25)
    shakes hands once with C{initialize} and answers the server's own requests
    (C{ping}, and the questions the injected handlers can answer).
  - L{mcpx.upstream.modern_session.ModernSession} (2026-07-28) has no handshake:
    every request restates the revision, the client's capabilities and its
    identity in C{_meta}.  The server asks its questions by answering
    C{input_required}; those rounds are resolved with the same handlers, or handed
    to the caller.

Results come back in mcpx's internal shape, the newest one: a legacy result gains
C{resultType: "complete"}, which is what the 2026-07-28 revision says a missing
C{resultType} means.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any, ClassVar

from attrs import define, field, frozen
from twisted.internet.defer import Deferred, FirstError, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mcpx.call import Call
from mcpx.spec.methods import TASK_STATUS
from mcpx.spec.questions import ELICIT
from mcpx.spec.revision import Era, Revision
from mcpx.upstream.channel import Channel, SessionExpired
from mcpx.upstream.handlers import NO_HANDLERS, UpstreamHandlers
from mcpx.upstream.records import (
    InputRound,
    ServerDeclaration,
    TooManyRounds,
    UpstreamError,
    is_input_required,
    is_task,
)
from mcpx.upstream.tasks import (
    StatusWatcher,
    follow_modern_task,
    task_support,
    without_related_task,
)
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Notification, Request
from mcpx.wire.peer import RpcPeer

#: How many pages of a list mcpx follows before deciding the server is looping.
MAX_PAGES = 1000


def tool_call_params(
    name: str, arguments: Mapping[str, Any] | None, meta: Mapping[str, Any] | None
) -> dict[str, Any]:
    """
    The params of a C{tools/call} of tool C{name}, with C{arguments} and C{meta}
    themselves when they are dicts, else dicts of them: nothing that spells, sends or
    sends again a session's request changes either (a 2026-07-28 C{_meta} is a new
    object made of it, L{mcpx.upstream.modern_session.ModernSession._meta}), and the
    one caller, the pool, makes C{meta} for the call and changes neither after.
    """
    params: dict[str, Any] = {
        "name": name,
        "arguments": arguments if type(arguments) is dict else dict(arguments or {}),
    }
    if meta:
        params["_meta"] = meta if type(meta) is dict else dict(meta)
    return params


@frozen
class Sending:
    """
    A request as L{UpstreamSession.request} sent it, kept only when the server forgot
    the session it went on, so that L{UpstreamSession._sent_again} can send it again.
    """

    method: str
    params: Mapping[str, Any] | None
    timeout: float | None
    call: Call | None


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
        call: Call | None,
    ) -> Deferred[Any]:
        """Send one request as the era spells it (C{call}: see L{call})."""
        peer = self.peer  # as L{rpc} reads it, without a property's call
        assert peer is not None
        return peer.request(
            method,
            self._spelled(method, params, call),
            timeout=timeout,
            send_cancel=self.channel.cancels_with_notification,
            for_whom=call,
        )

    def _spelled(
        self, method: str, params: Mapping[str, Any] | None, call: Call | None
    ) -> dict[str, Any] | None:
        """The params of a request as this era sends them: a copy, as given."""
        return dict(params) if params is not None else None

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        call: Call | None = None,
    ) -> dict[str, Any]:
        """
        Send any request and return its result in mcpx's internal shape.

        A C{input_required} result is returned as it is; see L{call}, L{answer_inputs}
        and L{resume}.  Cancelling the coroutine's Deferred gives up on the request
        upstream.
        """
        return await self.call(method, params, timeout=timeout, resolve_inputs=False, call=call)

    def _internal(self, method: str, result: Any) -> dict[str, Any]:
        """A request's result in mcpx's internal shape: an object with a C{resultType}."""
        if not isinstance(result, dict):
            raise UpstreamError(self.name, f"{method} answered with a non-object result")
        result.setdefault("resultType", "complete")
        return result

    async def _sent_again(self, expired: SessionExpired, request: Sending) -> Any:
        """
        What to do when the server forgot the session a request went on: only a session
        of the handshake era has one to open again (L{mcpx.upstream.legacy_session}).
        """
        raise expired

    async def call(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        resolve_inputs: bool = True,
        call: Call | None = None,
    ) -> dict[str, Any]:
        """
        L{request}, with any C{input_required} rounds answered through the handlers when
        C{resolve_inputs} (up to C{max_rounds}).

        @param call: the call this request is made for (a
            L{mcpx.call.Call}): its questions are answered knowing it, and
            a 2026-07-28 server is declared the capabilities its C{declared} names.
        """
        # L{request}'s own work, here: a call's answer passes through one coroutine the
        # fewer on its way back.
        try:
            result = await self._send(method, params, timeout, call)
        except SessionExpired as expired:
            result = await self._sent_again(expired, Sending(method, params, timeout, call))
        result = self._internal(method, result)
        if not resolve_inputs or result["resultType"] == "complete":
            # Neither a question nor a task (L{_internal} gave it a C{resultType}).
            return result
        rounds = 0
        while is_input_required(result):
            rounds += 1
            if rounds > self.max_rounds:
                raise TooManyRounds(
                    self.name, f"{method} still asked for input after {self.max_rounds} rounds"
                )
            round_ = self.input_round(method, params, result)
            answers = await self.answer_inputs(round_, call)
            result = await self.resume(round_, answers, timeout=timeout, call=call)
        if method == "tools/call" and is_task(result):
            # The server made the call a task (2026-07-28 extension): its call still
            # gets the call's own result, once the task has one.
            return await follow_modern_task(self, result, params or {}, timeout=timeout, call=call)
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

    async def answer_inputs(self, round_: InputRound, call: Call | None = None) -> dict[str, Any]:
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
                        key, method, params if isinstance(params, Mapping) else {}, call
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
        self, key: str, method: str, params: Mapping[str, Any], call: Call | None
    ) -> dict[str, Any]:
        try:
            asked = without_related_task(params)
            return dict(await self.handlers.answer(method, asked, call=call, key=key))
        except RpcError as e:
            if method == ELICIT:
                # An input response is a result, never an error: the nearest the server
                # can hear of a client that answered its question with an error (or
                # could not be asked) is that the question was dismissed, and it
                # answers the call itself, as it would the error directly.
                self.log.info(
                    "{server}: input request {key!r} ({method}) was answered with an "
                    "error ({error}); the server is told it was cancelled",
                    server=self.name,
                    key=key,
                    method=method,
                    error=str(e),
                )
                return {"action": "cancel"}
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
        call: Call | None = None,
    ) -> dict[str, Any]:
        """Send a round's request again, new id, with the answers and the exact state."""
        params: dict[str, Any] = dict(round_.params)
        params["inputResponses"] = dict(input_responses)
        if round_.request_state is not None:
            params["requestState"] = round_.request_state
        return await self.request(round_.method, params, timeout=timeout, call=call)

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
            # An item that is not an object is no tool, prompt or resource: left out,
            # so that nothing reading the list has to expect anything else.
            items.extend(item for item in found if type(item) is dict)
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

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        resolve_inputs: bool = True,
        call: Call | None = None,
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """
        Call tool C{name}: L{call}'s coroutine itself where no call can be made a task
        this session starts (L{_may_call_as_task}), without a coroutine of its own
        around it.
        """
        params = tool_call_params(name, arguments, meta)
        if self._may_call_as_task():
            return self._call_tool_in_tasks_era(name, params, timeout, resolve_inputs, call)
        return self.call(
            "tools/call", params, timeout=timeout, resolve_inputs=resolve_inputs, call=call
        )

    async def _call_tool_in_tasks_era(
        self,
        name: str,
        params: dict[str, Any],
        timeout: float | None,
        resolve_inputs: bool,
        call: Call | None,
    ) -> dict[str, Any]:
        if await self._calls_as_task(name, timeout, call):
            return await self._call_as_task(params, timeout, call)
        return await self.call(
            "tools/call", params, timeout=timeout, resolve_inputs=resolve_inputs, call=call
        )

    def _may_call_as_task(self) -> bool:
        """
        Whether any call may be made a task this session starts and awaits itself
        (L{_calls_as_task} then says of each tool): never here; a 2026-07-28 server's
        own tasks are followed by L{call}.
        """
        return False

    async def _calls_as_task(self, name: str, timeout: float | None, call: Call | None) -> bool:
        """
        Whether a call of tool C{name} is made as a task this session starts and awaits
        itself (L{_call_as_task}), asked when L{_may_call_as_task}.
        """
        return False

    async def _call_as_task(
        self, params: dict[str, Any], timeout: float | None, call: Call | None
    ) -> dict[str, Any]:
        """A C{tools/call} with C{params}, made as a task and its result awaited."""
        raise NotImplementedError

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
        # Asked on the reply stream of a request made for a call, it is that call's
        # question, however many others are in flight on the connection.
        return Deferred.fromCoroutine(self._answer_server(request, self.rpc.carried_for))

    async def _answer_server(self, request: Request, call: Call | None) -> Mapping[str, Any]:
        params = request.params if isinstance(request.params, Mapping) else {}
        return await self.handlers.answer(request.method, without_related_task(params), call=call)

    def _server_notification(self, notification: Notification) -> None:
        params = notification.params if isinstance(notification.params, Mapping) else None
        if notification.method == TASK_STATUS and params is not None:
            task_id = params.get("taskId")
            watcher = self._task_watchers.get(task_id) if isinstance(task_id, str) else None
            if watcher is not None:
                watcher(params)
        self.handlers.notify(notification.method, params)
