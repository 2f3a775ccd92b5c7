# -*- test-case-name: tests.demo.test_demo -*-
"""
The demo MCP server: a small dual-era server over stdio, built on mcpx's own JSON-RPC layer.

Three layers, each testable alone:

  - L{DemoServer} answers one method for one revision.  It holds what never changes (the
    catalogue, shaped once per revision) and the clock.
  - L{mcpx.demo.session.DemoSession} is one connection's view: it decides the revision
    of each request.  A request whose C{_meta} names 2026-07-28 is served statelessly
    as 2026-07-28; any other request is legacy and needs an earlier C{initialize},
    whose agreed revision it gets.  Both kinds may share a connection, which the
    2026-07-28 versioning page allows.
  - L{mcpx.demo.stdio.DemoProtocol} frames it as newline-delimited JSON on a
    transport, through an L{mcpx.wire.peer.RpcPeer}.

L{mcpx.demo.stdio.run} puts the protocol on the process's stdin and stdout;
C{python -m mcpx.demo} calls it.

Two tools reach back to the client while they run, through the L{DemoClient} the session hands
to L{DemoServer.answer}: C{countdown} sends C{notifications/progress} for the request's
C{progressToken} on the server's clock, and C{ask} asks the user a question.  How C{ask}
asks depends on the revision: a legacy request gets an C{elicitation/create} request sent
to the client (when it declared elicitation), a 2026-07-28 request an C{input_required}
result that the client answers by sending the call again with C{inputResponses}.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx._version import __version__
from mcpx.demo.catalogue import (
    ASK_KEY,
    CANNOT_ASK,
    INSTRUCTIONS,
    PROMPTS,
    RESOURCES,
    TOOLS,
    DemoPrompt,
    DemoResource,
    DemoTool,
    InvalidArguments,
    ToolOutcome,
    ask_outcome,
    ask_request,
    ask_state,
    countdown_plan,
    countdown_progress,
)
from mcpx.spec.feature import Direction
from mcpx.spec.matrix import (
    capability_in,
    error_code_in,
    field_in,
    method_in,
)
from mcpx.spec.meta_keys import SERVER_INFO_KEY
from mcpx.spec.questions import ELICIT
from mcpx.spec.revision import (
    LEGACY_REVISIONS,
    NEWEST_FIRST,
    NEWEST_LEGACY,
    Revision,
)
from mcpx.wire.errors import RESOURCE_NOT_FOUND, RpcError
from mcpx.wire.messages import Request
from mcpx.wire.peer import RequestTimedOut

#: The name the demo reports in C{serverInfo}.
SERVER_NAME: Final = "mcpx-demo"
SERVER_TITLE: Final = "mcpx demo server"

#: Every revision the demo speaks, newest first: the legacy ones through C{initialize}, the
#: modern one on any request that names it.
SUPPORTED_VERSIONS: Final[tuple[str, ...]] = tuple(revision.value for revision in NEWEST_FIRST)


#: How long C{ask} waits for a legacy client to answer its C{elicitation/create}, in
#: seconds: a person is typing, but a client that never answers must not hold the call
#: forever.
ASK_TIMEOUT: Final = 600.0

#: How long (milliseconds) a 2026-07-28 client may cache a list, the discovery result or a
#: read.  Nothing the demo serves changes while it runs; five minutes still lets a client
#: notice an upgraded mcpx without restarting.
CACHE_TTL_MS: Final = 300_000

#: Every method the demo answers, in whichever revisions have it.
METHODS: Final[tuple[str, ...]] = (
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
)

log = Logger()

_LISTS: Final[Mapping[str, str]] = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}


def _served(revision: Revision) -> frozenset[str]:
    return frozenset(method for method in METHODS if method_in(method, revision))


def request_params(request: Request) -> dict[str, Any]:
    """C{params} as an object; JSON-RPC allows an array, which no MCP method takes."""
    params = request.params
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise RpcError.invalid_params("params must be an object")
    return params


def _text(params: Mapping[str, Any], name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str):
        raise RpcError.invalid_params(f"params.{name} must be a string")
    return value


def _progress_token(params: Mapping[str, Any]) -> str | int | None:
    """The C{progressToken} a request asks progress for, if any."""
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    # bool is an int to Python, not a token to JSON-RPC.
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def can_elicit_form(capabilities: Mapping[str, Any], revision: Revision) -> bool:
    """
    Whether client C{capabilities} allow a form-mode elicitation in C{revision}: the
    C{elicitation} capability is declared and, where modes exist, an empty one or one
    naming C{form} (a client declaring only C{url} cannot show a form).
    """
    declared = capabilities.get("elicitation")
    if not isinstance(declared, dict):
        return False
    if declared and capability_in("client", "elicitation.form", revision):
        return "form" in declared
    return True


@frozen
class DemoClient:
    """
    What the tool answering a request may use of the client that sent it.

    @ivar capabilities: the client's capabilities for this request: those of C{initialize}
        for a legacy request, those in C{_meta} for a 2026-07-28 one.
    @ivar notify: sends the client a notification.
    @ivar request: sends the client a request, or C{None} where the revision has no
        server-to-client requests (2026-07-28).
    """

    capabilities: Mapping[str, Any]
    notify: Callable[[str, dict[str, Any]], None]
    request: Callable[[str, dict[str, Any]], Deferred[Any]] | None = None


def no_notifications(method: str, params: dict[str, Any]) -> None:
    pass


#: The caller of a request that nothing can reach back to.
DETACHED: Final = DemoClient({}, no_notifications)

#: The answer to a request: at once, or later.
Answer = dict[str, Any] | Deferred[dict[str, Any]]


@frozen
class _ToolCall:
    """
    A call of a tool that reaches back to its client (L{DemoServer._runners}).

    @ivar arguments: the call's arguments, already checked by the tool.
    @ivar params: the whole request's params (its C{progressToken}, its retry's answers).
    """

    tool: DemoTool
    arguments: Mapping[str, Any]
    params: dict[str, Any]
    revision: Revision
    caller: DemoClient


def _arguments(params: Mapping[str, Any]) -> Mapping[str, Any]:
    arguments = params.get("arguments")
    if arguments is None:
        return {}
    if not isinstance(arguments, dict):
        raise RpcError.invalid_params("params.arguments must be an object")
    return arguments


class DemoServer:
    """
    Answers the demo's methods, one revision at a time.

    Everything that does not depend on a request (the lists, the capabilities, the
    discovery and C{initialize} results) is built once per revision here, so answering
    one of them costs a dictionary lookup.
    """

    def __init__(
        self,
        clock: IReactorTime,
        *,
        version: str = __version__,
        tools: tuple[DemoTool, ...] = TOOLS,
        prompts: tuple[DemoPrompt, ...] = PROMPTS,
        resources: tuple[DemoResource, ...] = RESOURCES,
    ) -> None:
        """
        @param clock: tells the C{now} tool the time, and paces C{countdown}.
        @param version: reported in C{serverInfo}.
        """
        self.clock = clock
        self._clock = clock
        self.version = version
        self._tools = {tool.name: tool for tool in tools}
        self._prompts = {prompt.name: prompt for prompt in prompts}
        self._resources = {resource.uri: resource for resource in resources}
        self._served = {revision: _served(revision) for revision in Revision}
        self.legacy_methods: frozenset[str] = frozenset().union(
            *(self._served[revision] for revision in LEGACY_REVISIONS)
        )
        self._static = {revision: self._build_static(revision) for revision in Revision}
        self._answers: dict[str, Callable[[dict[str, Any], Revision, DemoClient], Answer]] = {
            "tools/call": self._call_tool,
            "prompts/get": self._get_prompt,
            "resources/read": self._read_resource,
        }
        #: Tools that do more than compute their result: they reach back to the client.
        self._runners: dict[str, Callable[[_ToolCall], Answer]] = {
            "countdown": self._countdown,
            "ask": self._ask,
        }

    def server_info(self, revision: Revision) -> dict[str, Any]:
        """The C{Implementation} describing the demo to a C{revision} peer."""
        info = {"name": SERVER_NAME, "version": self.version}
        if field_in("Implementation.title", revision):
            info["title"] = SERVER_TITLE
        return info

    def capabilities(self, revision: Revision) -> dict[str, Any]:
        """
        What the demo offers, the same in every revision.  No C{listChanged} and no
        C{subscribe}: nothing ever changes.  No C{logging} either, since the demo has nothing
        to log to a client (so C{logging/setLevel} is -32601, as for any method behind a
        capability that was not advertised).
        """
        return {"tools": {}, "prompts": {}, "resources": {}}

    def serves(self, method: str, revision: Revision) -> bool:
        """Whether C{method} exists in C{revision} and the demo offers it."""
        return method in self._served[revision]

    def initialize(self, params: Mapping[str, Any]) -> tuple[Revision, dict[str, Any]]:
        """
        Agree on a legacy revision: the client's when it is one, else the newest legacy one
        (the client then decides whether it can use it).

        @return: the agreed revision and the C{InitializeResult}.
        """
        requested = _text(params, "protocolVersion")
        revision = Revision.find(requested)
        if revision is None or revision.is_modern:
            revision = NEWEST_LEGACY
        return revision, self._static[revision]["initialize"]

    def answer(
        self,
        method: str,
        params: dict[str, Any],
        revision: Revision,
        caller: DemoClient = DETACHED,
    ) -> Answer:
        """
        The result of C{method} for a C{revision} request (C{initialize} excepted: it
        changes the connection, see L{mcpx.demo.session.DemoSession}).  Most results
        are immediate; a C{countdown} or an C{ask} call's come later, as a Deferred.

        @param caller: what the tools may use of the client that sent the request.

        @raise RpcError: -32601 for a method this revision does not have or the demo does
            not offer; -32602 for bad params or an unknown name; -32002 (legacy) for an
            unknown resource.
        """
        if method not in self._served[revision] or method == "initialize":
            raise RpcError.method_not_found(method)
        static = self._static[revision].get(method)
        if static is not None:
            if method in _LISTS and params.get("cursor") is not None:
                # Every list fits in one page, so the demo never hands out a cursor.
                raise RpcError.invalid_params("Invalid cursor: this list has a single page")
            return static
        return self._answers[method](params, revision, caller)

    # The answers that depend on the request

    def _call_tool(self, params: dict[str, Any], revision: Revision, caller: DemoClient) -> Answer:
        name = _text(params, "name")
        tool = self._tools.get(name)
        if tool is None:
            raise RpcError.invalid_params(f"Unknown tool: {name}")
        arguments = _arguments(params)
        runner = self._runners.get(name)
        if runner is None:
            return self._outcome(tool.call(arguments, self._clock.seconds()), revision)
        refused = tool.refusal(arguments)
        if refused is not None:
            return self._outcome(refused, revision)
        return runner(_ToolCall(tool, arguments, params, revision, caller))

    def _outcome(self, outcome: ToolOutcome, revision: Revision) -> dict[str, Any]:
        return self._complete(outcome.to_json(revision), revision)

    def _countdown(self, call: _ToolCall) -> Deferred[dict[str, Any]]:
        """
        Count down on the clock, reporting each step when the request carries a
        C{progressToken}.  Cancelling the answer (the client's C{notifications/cancelled},
        or the connection closing) cancels the pending step, so nothing is left scheduled.
        """
        steps, interval = countdown_plan(call.arguments)
        token = _progress_token(call.params)
        with_message = field_in("ProgressNotification.message", call.revision)

        async def count() -> dict[str, Any]:
            for step in range(1, steps + 1):
                await deferLater(self._clock, interval, lambda: None)
                if token is None:
                    continue
                report: dict[str, Any] = {"progressToken": token, "progress": step, "total": steps}
                if with_message:
                    report["message"] = countdown_progress(step, steps)
                call.caller.notify("notifications/progress", report)
            outcome = call.tool.body(call.arguments, self._clock.seconds())
            return self._outcome(outcome, call.revision)

        return Deferred.fromCoroutine(count())

    def _ask(self, call: _ToolCall) -> Answer:
        """
        Ask the user through the client: by a request in a legacy revision, by an
        C{input_required} result in 2026-07-28.  A client that cannot be asked gets
        L{CANNOT_ASK}.
        """
        revision, caller = call.revision, call.caller
        if not can_elicit_form(caller.capabilities, revision):
            return self._outcome(CANNOT_ASK, revision)
        if field_in("InputRequiredResult.inputRequests", revision):
            return self._ask_by_result(call.arguments, call.params, revision)
        if caller.request is None or not method_in(
            ELICIT, revision, direction=Direction.SERVER_TO_CLIENT
        ):
            return self._outcome(CANNOT_ASK, revision)
        asking = caller.request(ELICIT, ask_request(call.arguments))
        answered: Deferred[dict[str, Any]] = asking.addCallbacks(
            lambda result: self._outcome(ask_outcome(result), revision),
            lambda failure: self._outcome(self._unanswered(failure), revision),
        )
        return answered

    @staticmethod
    def _unanswered(failure: Failure) -> ToolOutcome:
        if failure.check(RpcError):
            reason = f"the client refused: {failure.getErrorMessage()}"
        elif failure.check(RequestTimedOut):
            reason = f"nobody answered within {ASK_TIMEOUT:g}s"
        else:
            # The connection closed, or the call was cancelled: nobody reads this result,
            # but the Deferred must still end.
            reason = failure.getErrorMessage() or "the request ended"
        return ToolOutcome(f"The question could not be asked: {reason}.", is_error=True)

    def _ask_by_result(
        self, arguments: Mapping[str, Any], params: dict[str, Any], revision: Revision
    ) -> dict[str, Any]:
        """
        2026-07-28: the answer when the retry carries it for this question, else (first
        call, or a retry without a usable answer) the question as an C{input_required}
        result.  The specification prefers asking again to failing a retry that lacks
        its answer.
        """
        state = ask_state(arguments)
        responses = params.get("inputResponses")
        if params.get("requestState") == state and isinstance(responses, dict):
            response = responses.get(ASK_KEY)
            if isinstance(response, dict):
                return self._outcome(ask_outcome(response), revision)
        result: dict[str, Any] = {
            "resultType": "input_required",
            "inputRequests": {ASK_KEY: {"method": ELICIT, "params": ask_request(arguments)}},
            "requestState": state,
        }
        if field_in(f'_meta["{SERVER_INFO_KEY}"]', revision):
            result["_meta"] = {SERVER_INFO_KEY: self.server_info(revision)}
        return result

    def _get_prompt(
        self, params: dict[str, Any], revision: Revision, caller: DemoClient
    ) -> dict[str, Any]:
        name = _text(params, "name")
        prompt = self._prompts.get(name)
        if prompt is None:
            raise RpcError.invalid_params(f"Unknown prompt: {name}")
        try:
            rendered = prompt.render(_arguments(params))
        except InvalidArguments as e:
            raise RpcError.invalid_params(f"Invalid arguments for prompt {name!r}: {e}") from None
        return self._complete(rendered, revision)

    def _read_resource(
        self, params: dict[str, Any], revision: Revision, caller: DemoClient
    ) -> dict[str, Any]:
        uri = _text(params, "uri")
        resource = self._resources.get(uri)
        if resource is None:
            if error_code_in(RESOURCE_NOT_FOUND, revision):
                raise RpcError.resource_not_found(uri)
            # 2026-07-28 retired -32002 and reports an unknown resource as bad params.
            raise RpcError.invalid_params(f"Resource not found: {uri}", {"uri": uri})
        result = {"contents": [resource.contents()]}
        # The README is the same for everyone, but the caching page makes a read private
        # unless the server knows better for each resource; the demo keeps the default.
        return self._complete(result, revision, cache_scope="private")

    # Shaping

    def _complete(
        self, result: dict[str, Any], revision: Revision, cache_scope: str | None = None
    ) -> dict[str, Any]:
        """
        Add what C{revision} asks of every finished result: C{resultType} and the server's
        identity in C{_meta}; and, for a cacheable result, how long and by whom it may be
        cached.  Legacy revisions have none of these, so they get C{result} as it is.
        """
        if field_in("Result.resultType", revision):
            result["resultType"] = "complete"
        if field_in(f'_meta["{SERVER_INFO_KEY}"]', revision):
            result["_meta"] = {SERVER_INFO_KEY: self.server_info(revision)}
        if cache_scope is not None and field_in("CacheableResult.ttlMs", revision):
            result["ttlMs"] = CACHE_TTL_MS
            result["cacheScope"] = cache_scope
        return result

    def _build_static(self, revision: Revision) -> dict[str, dict[str, Any]]:
        served = self._served[revision]
        static: dict[str, dict[str, Any]] = {}
        if "initialize" in served:
            initialize: dict[str, Any] = {
                "protocolVersion": revision.value,
                "capabilities": self.capabilities(revision),
                "serverInfo": self.server_info(revision),
            }
            if field_in("InitializeResult.instructions", revision):
                initialize["instructions"] = INSTRUCTIONS
            static["initialize"] = initialize
        if "ping" in served:
            static["ping"] = {}
        if "server/discover" in served:
            discover = {
                "supportedVersions": list(SUPPORTED_VERSIONS),
                "capabilities": self.capabilities(revision),
                "instructions": INSTRUCTIONS,
            }
            static["server/discover"] = self._complete(discover, revision, cache_scope="public")
        entries: dict[str, list[dict[str, Any]]] = {
            "tools/list": [tool.to_json(revision) for tool in self._tools.values()],
            "prompts/list": [prompt.to_json(revision) for prompt in self._prompts.values()],
            "resources/list": [resource.to_json(revision) for resource in self._resources.values()],
            "resources/templates/list": [],
        }
        for method, key in _LISTS.items():
            if method in served:
                static[method] = self._complete({key: entries[method]}, revision, "public")
        return static
