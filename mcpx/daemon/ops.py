# -*- test-case-name: tests.daemon.test_ops -*-
"""
Everything the daemon can be asked to do, each operation declared once in L{OPS}.

An L{Op} names its HTTP method and path, its input and output as JSON Schema, and the
coroutine that does the work.  From the table come the C{/v1} routes
(L{mcpx.daemon.api}), the OpenAPI document (L{openapi_document}) and, later, the MCP
gateway's own tools, so the three can never disagree about what an operation takes.

Inputs are checked against the op's input schema with a validator compiled once, when
the table is built.  Outputs are not checked at run time (the tests do that): a proxied
call must stay cheap.
"""

from __future__ import annotations

import difflib
import enum
import functools
import itertools
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from attrs import Factory, field, frozen
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from twisted.internet.defer import CancelledError, Deferred, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx._version import __version__
from mcpx.daemon.events import EventBus, split_filter
from mcpx.daemon.reloading import ReloadRefused, Reloads
from mcpx.policy.errors import PolicyRefusal
from mcpx.pool import CallToken
from mcpx.pool.errors import (
    AnswerTooLarge,
    CallTimedOut,
    PoolError,
    ServerUnavailable,
    UnknownServer,
    UpstreamBroke,
)
from mcpx.pool.status import ReloadReport, ServerState, ServerStatus
from mcpx.questions.broker import Broker, InvalidAnswer, QuestionClosed, UnknownQuestion
from mcpx.questions.caller import Caller
from mcpx.questions.record import ELICIT, KINDS, ROUTES, SAMPLE, Question, QuestionState
from mcpx.scripts.artifacts import UnknownArtifact
from mcpx.scripts.outcome import RunFailed, RunOutcome, RunRefusedCall, TooManyRuns, UnknownRun
from mcpx.settings.render import render_json
from mcpx.settings.resolve import Settings
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.servers import RemoteServer, Scope, ServersConfig
from mcpx.spec.matrix import protocol_json
from mcpx.tasks.store import (
    PER_CLIENT_SETTING,
    Task,
    TaskIsOver,
    TaskStatus,
    TaskStore,
    TooManyTasks,
    TooManyTasksForClient,
)
from mcpx.upstream.session import Era, ServerDeclaration, UpstreamError
from mcpx.wire.errors import INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcError

if TYPE_CHECKING:
    from mcpx.auth.signin import SignIns
    from mcpx.scripts.runner import Scripts

_log = Logger()

#: The caller identity when a request names none (C{Mcpx-Client} header).
DEFAULT_CLIENT = "cli"

#: The most values one completion may carry (the MCP limit).
MAX_COMPLETION_VALUES = 100


# -- What the operations work with ---------------------------------------------------------


class DeclaringSession(Protocol):
    """The part of an upstream session the operations read: what the server declared."""

    @property
    def declaration(self) -> ServerDeclaration | None: ...


class PoolInterface(Protocol):
    """
    The warm pool, as the operations use it: L{mcpx.pool.Pool}, or a fake in tests.
    """

    async def session(self, server: str, client: str = "") -> DeclaringSession: ...

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        client: str = "",
        timeout: float | None = None,
        meta: Mapping[str, Any] | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        caller: CallToken | None = None,
    ) -> dict[str, Any]: ...

    async def request(
        self,
        server: str,
        method: str,
        params: Mapping[str, Any],
        *,
        client: str = "",
        timeout: float | None = None,
        caller: CallToken | None = None,
    ) -> dict[str, Any]: ...

    async def tools(self, server: str, *, client: str = "") -> list[dict[str, Any]]: ...
    async def prompts(self, server: str, *, client: str = "") -> list[dict[str, Any]]: ...
    async def resources(self, server: str, *, client: str = "") -> list[dict[str, Any]]: ...
    async def templates(self, server: str, *, client: str = "") -> list[dict[str, Any]]: ...
    def status(self) -> Sequence[ServerStatus]: ...
    async def restart(self, server: str) -> None: ...
    async def reload(self, servers: ServersConfig) -> ReloadReport: ...
    def retune(self, settings: Settings) -> None: ...


class OpHost(Protocol):
    """
    What an operation runs against: the daemon's parts (L{mcpx.daemon.http.DaemonHTTP}).

    @ivar pool: the warm pool, or C{None} while the daemon runs without one.
    @ivar settings: the resolved settings, or C{None} when none were given.
    @ivar reloads: runs reloads one at a time (L{mcpx.daemon.reloading}).
    @ivar broker: the questions upstream servers asked, or C{None} while the daemon runs
        without a broker.
    @ivar masker: hides the configured credentials in what the operations answer.
    """

    clock: IReactorTime
    pid: int
    started_at: float
    pool: PoolInterface | None
    events: EventBus
    settings: Settings | None
    servers: ServersConfig | None
    state_dir: str
    tasks: TaskStore
    reloads: Reloads
    broker: Broker | None
    masker: SecretMasker
    scripts: Scripts | None
    sign_ins: SignIns | None


@frozen
class Invocation:
    """
    One request for an operation.

    @ivar args: the input, already checked against the op's input schema.
    @ivar client: who is asking; the scope key of a C{scope: client} server.
    @ivar on_progress: where progress goes when the caller asked to see it.
    @ivar caller: the host request an MCP gateway tool runs for, so the questions its
        upstream calls cause can reach that host (C{mcpx_exec}).
    @ivar owner: whose the artifacts it makes are, when not C{client}'s (an MCP
        2026-07-28 request's client is a scope of that request alone).
    @ivar run: the C{mcpx_exec} run a CPython-mode program's call claims to be made
        for (C{X-Mcpx-Run} and C{X-Mcpx-Run-Key}), as (run id, key).
    """

    args: Mapping[str, Any]
    client: str = DEFAULT_CLIENT
    on_progress: Callable[[dict[str, Any]], None] | None = None
    caller: Caller | None = None
    owner: str | None = None
    run: tuple[str, str] | None = None


@frozen
class Reply:
    """An answer with a status (or headers) other than a plain C{200}."""

    body: Any
    status: int = 200
    headers: Mapping[str, str] = Factory(dict)


@frozen
class EventFeed:
    """
    The answer of the events operation: which events to stream, and how often to ping.

    @ivar resources: for a stream that watches resources (C{?uri=}), the (server,
        upstream URI) pairs it subscribed to; C{None} otherwise.
    @ivar watching: the data of its first event: what was subscribed, what was not.
    @ivar release: gives the subscriptions back; called once the stream ends.
    """

    servers: tuple[str, ...]
    kinds: tuple[str, ...]
    keep_alive: float
    resources: tuple[tuple[str, str], ...] | None = None
    watching: Mapping[str, Any] | None = None
    release: Callable[[], None] | None = None


#: The most resources one event stream may watch (C{GET /v1/events?uri=}).
MAX_WATCHED: Final = 64


class OpError(Exception):
    """
    A failed operation: an HTTP status and a stable snake_case code, a message that says
    what to do, and optional detail (the field at fault, the upstream JSON-RPC error,
    when to retry).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        rpc: Mapping[str, Any] | None = None,
        retry_in: float | None = None,
    ) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.rpc = rpc
        self.retry_in = retry_in

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """The C{"error"} object of an error answer."""
        shown: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            shown["field"] = self.field
        if self.rpc is not None:
            shown["rpc"] = dict(self.rpc)
        if self.retry_in is not None:
            shown["retry_in"] = self.retry_in
        return shown


#: Upstream JSON-RPC errors that blame the caller's input rather than the server: the answer
#: is a 4xx, so an HTTP client sees the mistake is its own (any other error code stays 502).
_UPSTREAM_REFUSALS: Final[Mapping[int, int]] = {INVALID_PARAMS: 422, RESOURCE_NOT_FOUND: 404}


def error_from(error: BaseException) -> OpError:
    """Any failure as the L{OpError} the caller sees, with the hint of where to look next."""
    if isinstance(error, OpError):
        return error
    if isinstance(error, RpcError):
        return OpError(
            _UPSTREAM_REFUSALS.get(error.code, 502),
            "upstream_error",
            f"the upstream server answered with JSON-RPC error {error.code}: {error.message}",
            rpc=error.to_json(),
        )
    if isinstance(error, PolicyRefusal):
        problems = error.data.get("errors")
        where = problems[0]["path"].strip("/").replace("/", ".") if problems else ""
        field = ("arguments." + where if where else "arguments") if problems else None
        return OpError(error.status, error.code, error.message, field=field)
    if isinstance(error, UnknownServer):
        return OpError(404, error.code, f"{error.message}; GET /v1/servers lists them")
    if isinstance(error, ServerUnavailable):
        return OpError(
            503,
            error.code,
            f"{error.message}; GET /v1/events?server={error.name} shows why",
            retry_in=error.retry_in,
        )
    if isinstance(error, CallTimedOut):
        return OpError(
            504, error.code, f'{error.message}; or pass "task": true to collect the result later'
        )
    if isinstance(error, UpstreamBroke):
        return OpError(
            error.status,
            error.code,
            f"{error.message}; GET /v1/servers shows its state",
            retry_in=error.retry_in,
        )
    if isinstance(error, AnswerTooLarge):
        return OpError(502, error.code, error.message)
    if isinstance(error, PoolError):
        return OpError(503, error.code, error.message, retry_in=error.retry_in)
    if isinstance(error, TooManyTasksForClient):
        return OpError(
            429,
            "too_many_tasks_for_client",
            f"caller {error.client!r} already holds {error.limit} tasks running or waiting "
            f"to be collected ({PER_CLIENT_SETTING}); collect finished ones with "
            "GET /v1/tasks/{id} and try again once they expire",
            retry_in=error.retry_in,
        )
    if isinstance(error, TooManyTasks):
        return OpError(
            503,
            "too_many_tasks",
            f"{error.limit} tasks are running or waiting to be collected; collect finished "
            f"ones with GET /v1/tasks/{{id}} (they are kept {error.ttl:g}s) and try again",
        )
    if isinstance(error, UpstreamError):
        return OpError(502, "upstream_failed", f"{error}; GET /v1/servers shows its state")
    return OpError(
        500,
        "internal_error",
        f"the daemon failed unexpectedly ({type(error).__name__}); its log has the details",
    )


def _unknown(status: int, code: str, what: str, name: str, known: Sequence[str]) -> OpError:
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return OpError(status, code, f"no {what} named {name!r}{hint}")


# -- The operation table -----------------------------------------------------------------

Handler = Callable[[OpHost, Invocation], Awaitable[Any]]


def _validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


_JSON_TYPES: Mapping[str, tuple[type, ...]] = {
    "string": (str,),
    "object": (dict,),
    "array": (list,),
    "boolean": (bool,),
    "number": (int, float),
    "integer": (int,),
}
#: The keywords a fast acceptor understands; a schema using any other is left to jsonschema.
_FAST_KEYWORDS = frozenset(
    {"type", "minLength", "exclusiveMinimum", "minimum", "description", "pattern"}
)


def _fast_property(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    if not set(schema) <= _FAST_KEYWORDS or not isinstance(schema.get("type"), str):
        return None
    kind = schema["type"]
    types = _JSON_TYPES.get(kind)
    if types is None:
        return None
    min_length = schema.get("minLength")
    above = schema.get("exclusiveMinimum")
    at_least = schema.get("minimum")
    if "pattern" in schema and kind != "string":
        return None
    # search, not fullmatch: the pattern keyword is unanchored, and jsonschema searches too.
    pattern = re.compile(schema["pattern"]).search if "pattern" in schema else None

    def accepts(value: Any) -> bool:
        # Exact types: decoded JSON has no subclasses, and it keeps True from passing as 1.
        if type(value) not in types:
            return False
        if min_length is not None and len(value) < min_length:
            return False
        if pattern is not None and pattern(value) is None:
            return False
        if above is not None and not value > above:
            return False
        return at_least is None or value >= at_least

    return accepts


def fast_acceptor(schema: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool] | None:
    """
    A quick yes for the common, valid input of a flat object schema, compiled from
    the schema itself; C{None} when the schema is beyond it.

    It only ever says "valid" for input the full validator accepts: on C{False} the
    caller runs jsonschema, which finds and names the fault.  This keeps jsonschema
    off the per-call path (it was about a tenth of a /v1/call) without a second,
    hand-written statement of any op's input.
    """
    if schema.get("type") != "object" or not set(schema) <= {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "description",
        "not",
    }:
        return None
    exclusive = _exclusive_flags(schema["not"]) if "not" in schema else ()
    if exclusive is None:
        return None
    if schema.get("additionalProperties", True) not in (True, False):
        return None
    closed = schema.get("additionalProperties") is False
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, prop in schema.get("properties", {}).items():
        check = _fast_property(prop)
        if check is None:
            return None
        checks[name] = check
    required = tuple(schema.get("required", ()))

    def accepts(args: Mapping[str, Any]) -> bool:
        for name in required:
            if name not in args:
                return False
        if exclusive and all(args.get(name) is True for name in exclusive):
            return False
        for name, value in args.items():
            check = checks.get(name)
            if check is None:
                if closed:
                    return False
            elif not check(value):
                return False
        return True

    return accepts


def _exclusive_flags(schema: Mapping[str, Any]) -> tuple[str, ...] | None:
    """
    The flags of a C{not} schema that forbids them all being true together (see
    L{exclusive_flags}); C{None} for any other C{not}.
    """
    names = tuple(schema.get("required", ()))
    props = schema.get("properties", {})
    allowed = {"required", "properties", "description"}
    if not names or set(props) != set(names) or not set(schema) <= allowed:
        return None
    if any(props[name] != {"const": True} for name in names):
        return None
    return names


def exclusive_flags(*names: str, why: str) -> dict[str, Any]:
    """
    A C{not} schema refusing input where the boolean fields C{names} are all true; C{why} is
    the message the refusal gives, naming the last of them as the field at fault.
    """
    return {
        "properties": {name: {"const": True} for name in names},
        "required": list(names),
        "description": why,
    }


class Media(enum.Enum):
    """What a successful answer is."""

    JSON = "application/json"
    EVENT_STREAM = "text/event-stream"


NDJSON = "application/x-ndjson"


@frozen(eq=False)
class Op:
    """
    One operation, declared once.

    @ivar name: its identity: the route's endpoint, the OpenAPI C{operationId}, the
        gateway tool's name.
    @ivar path: an OpenAPI path template (C{/v1/tools/{server}/{tool}}).
    @ivar input_schema: the whole input as one object: path parameters, then the query
        (for C{GET}) or the JSON body (otherwise).
    @ivar output_schema: the C{200} answer's body (for an event stream, one event).
    @ivar handler: does the work; returns the body, a L{Reply} or an L{EventFeed}.
    @ivar errors: the error statuses it may answer with besides C{400}.
    @ivar accepted_schema: the C{202} answer's body, for an op that may answer later.
    @ivar progress_schema: one NDJSON line, for an op that can stream progress.
    @ivar uses_client: whether the C{Mcpx-Client} header matters to it.
    @ivar gateway: whether it is offered as an MCP gateway tool too.
    """

    name: str
    summary: str
    method: str
    path: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any]
    handler: Handler
    description: str = ""
    tag: str = "servers"
    errors: tuple[int, ...] = ()
    media: Media = Media.JSON
    accepted_schema: Mapping[str, Any] | None = None
    progress_schema: Mapping[str, Any] | None = None
    uses_client: bool = False
    gateway: bool = True
    validator: Draft202012Validator = field(
        init=False, default=Factory(lambda self: _validator(self.input_schema), takes_self=True)
    )
    accepts: Callable[[Mapping[str, Any]], bool] | None = field(
        init=False, default=Factory(lambda self: fast_acceptor(self.input_schema), takes_self=True)
    )
    path_params: tuple[str, ...] = field(
        init=False,
        default=Factory(lambda self: tuple(re.findall(r"{(\w+)}", self.path)), takes_self=True),
    )

    @property
    def properties(self) -> Mapping[str, Mapping[str, Any]]:
        props: Mapping[str, Mapping[str, Any]] = self.input_schema.get("properties", {})
        return props

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(self.input_schema.get("required", ()))

    @property
    def query_params(self) -> tuple[str, ...]:
        """The inputs read from the query string (a C{GET} has no body)."""
        if self.method != "GET":
            return ()
        return tuple(name for name in self.properties if name not in self.path_params)

    @property
    def body_params(self) -> tuple[str, ...]:
        if self.method == "GET":
            return ()
        return tuple(name for name in self.properties if name not in self.path_params)

    def check(self, args: Mapping[str, Any]) -> None:
        """
        Refuse input that does not match the input schema.

        @raise OpError: C{400 invalid_input}, naming the field at fault.
        """
        if self.accepts is not None and self.accepts(args):
            return
        error = best_match(self.validator.iter_errors(args))
        if error is None:
            return
        where = _field_of(error)
        message = error.message
        refused = error.validator_value
        if error.validator == "not" and isinstance(refused, Mapping) and "description" in refused:
            # An exclusive_flags refusal: its own words, and its last flag as the field.
            message = refused["description"]
            where = refused["required"][-1]
        raise OpError(
            400,
            "invalid_input",
            f"{where or 'input'}: {message}; GET /openapi.json has the schema of "
            f"{self.method} {self.path}",
            field=where,
        )


def _field_of(error: ValidationError) -> str:
    """The dotted path of the field at fault, including a missing or unexpected one."""
    path = [str(part) for part in error.absolute_path]
    instance = error.instance
    wanted = error.validator_value
    if error.validator == "required" and isinstance(instance, Mapping) and isinstance(wanted, list):
        missing = [n for n in wanted if n not in instance]
        if missing:
            path.append(str(missing[0]))
    elif error.validator == "additionalProperties" and isinstance(instance, Mapping):
        allowed = error.schema.get("properties", {}) if isinstance(error.schema, Mapping) else {}
        extra = sorted(str(n) for n in instance if n not in allowed)
        if extra:
            path.append(extra[0])
    return ".".join(path)


# -- Schemas -------------------------------------------------------------------------------

_NAME = {"type": "string", "minLength": 1}
#: What a C{call_id} a caller chooses may be: a short, plain word.
CALL_ID_PATTERN = "^[A-Za-z0-9_.-]{1,64}$"
_STRINGS = {"type": "array", "items": {"type": "string"}}
_NULLABLE_STRING = {"type": ["string", "null"]}


def _object(
    properties: Mapping[str, Any] | None = None,
    required: Iterable[str] = (),
    *,
    closed: bool = True,
    description: str = "",
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties or {})}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


NO_INPUT = _object()

ERROR_OBJECT = _object(
    {
        "code": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "message": {"type": "string"},
        "field": {"type": "string", "description": "The input field at fault."},
        "rpc": _object(
            {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
            ["code", "message"],
            description="The upstream server's JSON-RPC error, as it sent it.",
        ),
        "retry_in": {"type": "number", "description": "Seconds until a retry may succeed."},
    },
    ["code", "message"],
)

ERROR_SCHEMA = _object({"error": ERROR_OBJECT}, ["error"])

SERVER_STATUS = _object(
    {
        "name": _NAME,
        "state": {"type": "string", "enum": [state.value for state in ServerState]},
        "transport": {"type": "string", "enum": ["stdio", "http"]},
        "scope": {"type": "string", "enum": [scope.value for scope in Scope]},
        "instances": {"type": "integer", "minimum": 0},
        "in_flight": {"type": "integer", "minimum": 0},
        "era": {"enum": [*(era.value for era in Era), None]},
        "revision": _NULLABLE_STRING,
        "last_error": _NULLABLE_STRING,
        "retry_in": {"type": ["number", "null"], "minimum": 0},
    },
    ["name", "state", "last_error", "instances", "era", "revision", "transport"],
)

TOOL_SUMMARY = _object(
    {
        "server": _NAME,
        "name": _NAME,
        "title": _NULLABLE_STRING,
        "description": _NULLABLE_STRING,
    },
    ["server", "name", "title", "description"],
)

CALL_TOOL_RESULT = _object(
    {
        "content": {"type": "array", "items": {"type": "object"}},
        "structuredContent": {"type": "object"},
        "isError": {"type": "boolean"},
    },
    closed=False,
    description="The upstream server's CallToolResult, as it sent it.",
)

TASK_STATUS = {"type": "string", "enum": [status.value for status in TaskStatus]}

TASK = _object(
    {
        "id": _NAME,
        "status": TASK_STATUS,
        "result": CALL_TOOL_RESULT,
        "error": ERROR_OBJECT,
    },
    ["id", "status"],
)

TASK_SUMMARY = _object(
    {
        "id": _NAME,
        "status": TASK_STATUS,
        "origin": {"type": "string", "enum": ["v1", "mcp", "resumable"]},
        "created": {"type": "number"},
        "updated": {"type": "number"},
        "server": {"type": "string"},
        "tool": {"type": "string"},
        "message": {"type": "string"},
    },
    ["id", "status", "origin", "created", "updated"],
)

COMPLETION = _object(
    {
        "values": {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": MAX_COMPLETION_VALUES,
        },
        "total": {"type": "integer", "minimum": 0},
        "hasMore": {"type": "boolean"},
    },
    ["values"],
    closed=False,
)

EVENT = _object(
    {
        "kind": {"type": "string"},
        "server": _NULLABLE_STRING,
        "time": {"type": "number"},
    },
    ["kind", "server", "time"],
    closed=False,
    description="One SSE event's data; its event type is the kind, its id the sequence.",
)

#: How a question is answered: C{action}, with C{content} (an elicitation) or C{result}
#: (sampling, roots) when it accepts.
ANSWER_ACTIONS = ("accept", "decline", "cancel")

#: Who answered, when the caller of C{POST /v1/questions/{id}/answer} does not say.
DEFAULT_ANSWERER = "api"

QUESTION = _object(
    {
        "id": _NAME,
        "server": {"type": "string", "description": "The configured server that asked."},
        "scope_key": {"type": "string", "description": "The asking instance's scope key."},
        "method": {"type": "string", "enum": list(KINDS)},
        "kind": {"type": "string", "enum": list(KINDS.values())},
        "params": {
            "type": "object",
            "description": "What the server asks: the request's params, as they are shown.",
        },
        "created": {"type": "number"},
        "deadline": {
            "type": "number",
            "description": "When a pending question expires (answered as cancelled).",
        },
        "route": {"type": "string", "enum": list(ROUTES)},
        "call_id": _NULLABLE_STRING,
        "state": {"type": "string", "enum": [state.value for state in QuestionState]},
        "answer": {
            "type": ["object", "null"],
            "description": "The result that went, or goes, back to the server.",
        },
        "answered_by": _NULLABLE_STRING,
        "finished": {"type": ["number", "null"]},
        "orphaned": {
            "type": "boolean",
            "description": "Asked before the daemon restarted: nothing upstream waits for it.",
        },
    },
    ["id", "server", "method", "kind", "params", "created", "deadline", "route", "state"],
    closed=False,
)


# -- Helpers the handlers share ------------------------------------------------------------


def _pool(host: OpHost) -> PoolInterface:
    if host.pool is None:
        raise OpError(
            503,
            "pool_unavailable",
            "this daemon is running without its server pool, so it cannot reach servers; "
            "restart it with `mcpx daemon`",
        )
    return host.pool


def _settings(host: OpHost) -> Settings:
    if host.settings is None:
        raise OpError(
            503,
            "settings_unavailable",
            "this daemon was started without its settings; `mcpx settings --json` shows them",
        )
    return host.settings


def _broker(host: OpHost) -> Broker:
    if host.broker is None:
        raise OpError(
            503,
            "questions_unavailable",
            "this daemon runs without its question broker, so it holds no questions to "
            "list or answer; restart it with `mcpx daemon`",
        )
    return host.broker


def question_json(question: Question) -> dict[str, Any]:
    """A question as the API shows it: its record, and its C{kind}."""
    shown = question.to_json()
    shown["kind"] = question.kind
    return shown


def _unknown_question(question_id: str) -> OpError:
    return OpError(
        404,
        "unknown_question",
        f"no question {question_id!r}: it never existed, or it ended long enough ago to be "
        "forgotten; GET /v1/questions?all=true lists the ones kept",
    )


def _closed_question(question: Question) -> OpError:
    how = (
        "expired at its deadline"
        if question.state is QuestionState.EXPIRED
        else (f"{question.state.value} by {question.answered_by or 'someone else'}")
    )
    return OpError(
        409,
        "question_closed",
        f"question {question.id!r} is no longer pending: it was {how}, so this answer was "
        "not used; GET /v1/questions lists the pending ones",
    )


def _tool_summary(server: str, tool: Mapping[str, Any]) -> dict[str, Any]:
    annotations = tool.get("annotations")
    title = tool.get("title")
    if title is None and isinstance(annotations, Mapping):
        title = annotations.get("title")
    description = tool.get("description")
    return {
        "server": server,
        "name": tool.get("name"),
        "title": title if isinstance(title, str) else None,
        "description": description if isinstance(description, str) else None,
    }


def _matches(summary: Mapping[str, Any], words: Sequence[str]) -> bool:
    text = " ".join(
        str(summary[key]) for key in ("name", "title", "description") if summary[key]
    ).lower()
    return all(word in text for word in words)


_TEMPLATE_EXPRESSION = re.compile(r"{([^}]*)}")


def template_variables(uri_template: str) -> list[str]:
    """The variable names of an RFC 6570 URI template, in order, each once."""
    names: list[str] = []
    for expression in _TEMPLATE_EXPRESSION.findall(uri_template):
        for spec in expression.lstrip("+#./;?&=,!@|").split(","):
            name = spec.split(":", 1)[0].rstrip("*").strip()
            if name and name not in names:
                names.append(name)
    return names


# -- Handlers ------------------------------------------------------------------------------


async def list_servers(host: OpHost, call: Invocation) -> dict[str, Any]:
    return {"servers": [status.to_json() for status in _pool(host).status()]}


async def list_tools(host: OpHost, call: Invocation) -> dict[str, Any]:
    pool = _pool(host)
    server = call.args.get("server")
    words = str(call.args.get("search", "")).lower().split()
    errors: list[dict[str, Any]] = []
    if server:
        fetched = [(server, await pool.tools(server, client=call.client))]
    else:

        async def one(name: str) -> tuple[str, list[dict[str, Any]]]:
            try:
                return name, await pool.tools(name, client=call.client)
            except CancelledError:
                raise
            except Exception as e:
                # One server that cannot be reached must not hide every other's tools.
                errors.append({"server": name, "error": error_from(e).to_json()})
                return name, []

        names = [status.name for status in pool.status()]
        fetched = await gatherResults([Deferred.fromCoroutine(one(name)) for name in names])
    tools: list[dict[str, Any]] = []
    for name, catalogue in fetched:
        for tool in catalogue:
            summary = _tool_summary(name, tool)
            if not words or _matches(summary, words):
                tools.append(summary)
    answer: dict[str, Any] = {"tools": tools}
    if errors:
        answer["errors"] = sorted(errors, key=lambda entry: str(entry["server"]))
    return answer


async def describe_tool(host: OpHost, call: Invocation) -> dict[str, Any]:
    server, name = call.args["server"], call.args["tool"]
    catalogue = await _pool(host).tools(server, client=call.client)
    for tool in catalogue:
        if tool.get("name") == name:
            return {"server": server, "tool": tool}
    raise _unknown(404, "unknown_tool", f"tool on server {server!r}", name, _tool_names(catalogue))


def _tool_names(catalogue: Iterable[Mapping[str, Any]]) -> list[str]:
    return [str(tool.get("name")) for tool in catalogue]


async def call_tool(host: OpHost, call: Invocation) -> Any:
    if call.run is not None:
        return await _call_in_run(host, call, call.run)
    pool = _pool(host)
    args = call.args
    server, tool = args["server"], args["tool"]
    arguments = args.get("arguments", {})
    timeout = args.get("timeout")
    call_id = args.get("call_id")
    task_named = call_id is None and bool(args.get("task"))
    # Always a caller, so a question the upstream asks is attributed to this call (the
    # pool's rule) and carries its id in the broker, where the caller can find it.  It
    # declares nothing and cannot be asked directly: its questions wait in the broker.
    if call_id is None:
        # A task's call is named after the task, once it has one (below).
        call_id = "" if task_named else _v1_call_id()
    caller = Caller(call_id, {}, None, wants_task=bool(args.get("task")))

    async def work() -> dict[str, Any]:
        try:
            return await pool.call_tool(
                server,
                tool,
                arguments,
                client=call.client,
                timeout=timeout,
                on_progress=call.on_progress if args.get("progress") else None,
                caller=caller,
            )
        except RpcError as e:
            if e.code != INVALID_PARAMS:
                raise
            catalogue = await _listed_or_none(pool.tools(server, client=call.client))
            names = _tool_names(catalogue or ())
            if catalogue is None or tool in names:
                raise
            raise _unknown(404, "unknown_tool", f"tool on server {server!r}", tool, names) from e

    if not args.get("task"):
        return await work()
    task = host.tasks.start(work, _task_error, client=call.client, server=server, tool=tool)
    if task_named:
        # Before the upstream can ask anything: that takes a turn of the reactor.
        caller.id = task.id
    return Reply(
        {"task": {"id": task.id, "status": task.status.value}},
        status=202,
        headers={"location": f"/v1/tasks/{task.id}"},
    )


async def _call_in_run(host: OpHost, call: Invocation, run: tuple[str, str]) -> Any:
    """A call a CPython-mode program makes: its run's, bounded and counted by it."""
    args = call.args
    if args.get("task") or args.get("progress") or "call_id" in args:
        raise OpError(
            400,
            "invalid_input",
            'a call made for a run (X-Mcpx-Run) takes no "task", "progress" or "call_id": '
            "it is the run's",
        )
    try:
        return await _scripts(host).call_in_run(
            run[0],
            run[1],
            server=args["server"],
            tool=args["tool"],
            arguments=args.get("arguments", {}),
            timeout=args.get("timeout"),
        )
    except UnknownRun as e:
        raise OpError(
            403,
            "unknown_run",
            f"no run {e.run!r} is running with that key (X-Mcpx-Run, X-Mcpx-Run-Key): "
            "it ended, or the header was not given to this program",
        ) from None
    except RunRefusedCall as e:
        raise OpError(_RUN_STATUS.get(e.code, 429), e.code, e.message) from None


#: Numbers the C{/v1/call} calls that name no C{call_id} and are not tasks.
_v1_calls = itertools.count(1)


def _v1_call_id() -> str:
    """The id of a call that did not name one: C{v1-} and a number, unique in this daemon."""
    return f"v1-{next(_v1_calls)}"


def _task_error(failure: Failure) -> dict[str, Any]:
    error = error_from(failure.value or Exception(failure.getErrorMessage()))
    if error.status == 500:
        _log.failure("a task failed unexpectedly", failure)
    return error.to_json()


def _task(host: OpHost, task_id: str) -> Task:
    task = host.tasks.get(task_id)
    if task is None:
        raise OpError(
            404,
            "unknown_task",
            f"no task {task_id!r}: it never existed, or it finished more than "
            f"{host.tasks.ttl:g}s ago and was forgotten",
        )
    return task


async def get_task(host: OpHost, call: Invocation) -> dict[str, Any]:
    return _task(host, call.args["id"]).to_json()


async def list_tasks(host: OpHost, call: Invocation) -> dict[str, Any]:
    args = call.args
    state = args.get("state")
    found = host.tasks.tasks(
        client=args.get("client"),
        server=args.get("server"),
        status=TaskStatus(state) if state is not None else None,
    )
    return {"tasks": [task.summary() for task in found]}


async def cancel_task(host: OpHost, call: Invocation) -> dict[str, Any]:
    task = _task(host, call.args["id"])
    try:
        host.tasks.cancel(task.id, "cancelled through the API (POST /v1/tasks/{id}/cancel)")
    except TaskIsOver:
        raise OpError(
            409,
            "task_finished",
            f"task {task.id!r} is already {task.status.value}: a finished task cannot be "
            "cancelled; collect it with GET /v1/tasks/{id}",
        ) from None
    return task.to_json()


async def _listed_or_none(
    listing: Awaitable[Sequence[Mapping[str, Any]]],
) -> Sequence[Mapping[str, Any]] | None:
    """A catalogue, or C{None} when it cannot be had (the original error is what matters)."""
    try:
        return await listing
    except Exception:
        return None


# The upstream answers an unknown tool or prompt, and wrong arguments, with the same -32602;
# only on that error path is the (cached) catalogue consulted, to tell "no such name" (404,
# with close names) from "the server refused these arguments" (422).


async def get_prompt(host: OpHost, call: Invocation) -> dict[str, Any]:
    pool = _pool(host)
    server, name = call.args["server"], call.args["name"]
    params: dict[str, Any] = {"name": name}
    if "arguments" in call.args:
        params["arguments"] = call.args["arguments"]
    try:
        return await pool.request(server, "prompts/get", params, client=call.client)
    except RpcError as e:
        if e.code != INVALID_PARAMS:
            raise
        catalogue = await _listed_or_none(pool.prompts(server, client=call.client))
        names = [str(prompt.get("name")) for prompt in catalogue or ()]
        if catalogue is None or name in names:
            raise
        raise _unknown(404, "unknown_prompt", f"prompt on server {server!r}", name, names) from e


async def read_resource(host: OpHost, call: Invocation) -> dict[str, Any]:
    server, uri = call.args["server"], call.args["uri"]
    try:
        return await _pool(host).request(server, "resources/read", {"uri": uri}, client=call.client)
    except RpcError as e:
        # The URI is the request's only parameter: a refusal of it means there is no such
        # resource, whichever of the two codes revisions have used for that.
        if e.code not in (INVALID_PARAMS, RESOURCE_NOT_FOUND):
            raise
        raise OpError(
            404,
            "unknown_resource",
            f"server {server!r} has no resource {uri!r} ({e.message}); GET /v1/servers "
            "and the server's resources/list say what it has",
            rpc=e.to_json(),
        ) from e


async def complete(host: OpHost, call: Invocation) -> dict[str, Any]:
    """
    Forward to a server that declared C{completions}; otherwise answer from the cache.

    Without the server's help, the only names mcpx knows are the prompt's argument names
    or the resource template's variables; the answer says so in C{reason}.
    """
    pool = _pool(host)
    server = call.args["server"]
    ref, argument = call.args["ref"], call.args["argument"]
    session = await pool.session(server, call.client)
    declaration = session.declaration
    if declaration is not None and declaration.declares("completions"):
        params: dict[str, Any] = {"ref": ref, "argument": argument}
        if "context" in call.args:
            params["context"] = call.args["context"]
        result = await pool.request(server, "completion/complete", params, client=call.client)
        return {"completion": result.get("completion", {"values": []}), "source": "upstream"}
    if ref["type"] == "ref/prompt":
        prompts = await pool.prompts(server, client=call.client)
        found = next((p for p in prompts if p.get("name") == ref["name"]), None)
        if found is None:
            known = [str(p.get("name")) for p in prompts]
            raise _unknown(
                404, "unknown_prompt", f"prompt on server {server!r}", ref["name"], known
            )
        names = [str(a.get("name")) for a in found.get("arguments") or ()]
        what = f"the argument names of prompt {ref['name']!r}"
    else:
        templates = await pool.templates(server, client=call.client)
        uri = ref["uri"]
        match = next((t for t in templates if t.get("uriTemplate") == uri), None)
        if match is None:
            known = [str(t.get("uriTemplate")) for t in templates]
            raise _unknown(
                404, "unknown_resource_template", f"resource template on {server!r}", uri, known
            )
        names = template_variables(uri)
        what = f"the variables of resource template {uri!r}"
    if argument["name"] not in names:
        raise OpError(
            400,
            "invalid_input",
            f"argument.name: {argument['name']!r} is not one of {what}: "
            f"{', '.join(names) or 'none'}",
            field="argument.name",
        )
    shown = names[:MAX_COMPLETION_VALUES]
    return {
        "completion": {"values": shown, "total": len(names), "hasMore": len(names) > len(shown)},
        "source": "cache",
        "reason": f"server {server!r} did not declare completions, so these are {what} "
        "from the cached catalogue, not suggested values",
    }


async def list_questions(host: OpHost, call: Invocation) -> dict[str, Any]:
    broker = _broker(host)
    state = call.args.get("state")
    if state is not None:
        found = broker.questions(state=QuestionState(state))
    elif call.args.get("all") == "true":
        found = broker.questions()
    else:
        found = broker.questions(state=QuestionState.PENDING)
    run = call.args.get("run")
    if run is not None:
        # A run's calls are made for a caller named after it, unless the run had the
        # host's own caller (an MCP mcpx_exec), whose questions go to that host.
        found = [question for question in found if question.call_id == run]
    return {"questions": [question_json(question) for question in found]}


async def get_question(host: OpHost, call: Invocation) -> dict[str, Any]:
    question = _broker(host).get(call.args["id"])
    if question is None:
        raise _unknown_question(call.args["id"])
    return question_json(question)


def _accepting(question: Question, args: Mapping[str, Any]) -> dict[str, Any]:
    """What the broker is given for an accepting answer: checked for the right field."""
    if question.method == ELICIT:
        if "result" in args:
            raise OpError(
                400,
                "invalid_input",
                'result: an elicitation is answered with "content" (the form\'s values), '
                "not result",
                field="result",
            )
        accepted: dict[str, Any] = {"action": "accept"}
        if "content" in args:
            accepted["content"] = args["content"]
        return accepted
    what = (
        "a CreateMessageResult"
        if question.method == SAMPLE
        else 'a ListRootsResult, {"roots": [...]}'
    )
    if "content" in args:
        raise OpError(
            400,
            "invalid_input",
            f'content: a {question.kind} question is answered with "result" ({what}), not content',
            field="content",
        )
    if "result" not in args:
        raise OpError(
            400,
            "invalid_input",
            f'result: accepting a {question.kind} question needs "result": {what}',
            field="result",
        )
    result: dict[str, Any] = args["result"]
    return result


async def answer_question(host: OpHost, call: Invocation) -> dict[str, Any]:
    """
    Accept, decline or cancel a pending question.

    The broker checks an accepting answer against what was asked; a refused answer
    leaves the question pending, so the caller can try again.
    """
    broker = _broker(host)
    args = call.args
    question_id: str = args["id"]
    action: str = args["action"]
    by: str = args.get("by", DEFAULT_ANSWERER)
    question = broker.get(question_id)
    if question is None:
        raise _unknown_question(question_id)
    if action != "accept":
        for name in ("content", "result"):
            if name in args:
                raise OpError(
                    400,
                    "invalid_input",
                    f"{name}: only an accepting answer carries {name}; drop it to {action}",
                    field=name,
                )
    try:
        if action == "decline":
            closed = broker.decline(question_id, by=by)
        elif action == "cancel":
            closed = broker.cancel(question_id, by=by)
        else:
            closed = broker.answer(question_id, _accepting(question, args), by=by)
    except UnknownQuestion:
        raise _unknown_question(question_id) from None
    except QuestionClosed as e:
        raise _closed_question(e.question) from None
    except InvalidAnswer as e:
        raise OpError(
            400,
            "invalid_answer",
            f"{e}; the question is still pending: answer it again "
            f"(GET /v1/questions/{question_id} shows what it asks)",
        ) from None
    return question_json(closed)


async def restart_server(host: OpHost, call: Invocation) -> dict[str, Any]:
    pool = _pool(host)
    name = call.args["name"]
    await pool.restart(name)
    statuses = pool.status()
    for status in statuses:
        if status.name == name:
            return {"server": status.to_json()}
    # Restarted, then reloaded away before it could be shown.
    raise error_from(UnknownServer(name, [s.name for s in statuses]))


def _oauth_server(host: OpHost, name: str) -> tuple[SignIns, RemoteServer]:
    """The sign-ins and the named server, which must be a remote server using OAuth."""
    from mcpx.auth.signin import uses_oauth

    sign_ins = host.sign_ins
    if sign_ins is None:
        raise OpError(503, "auth_unavailable", "this daemon runs without OAuth sign-ins")
    servers = host.servers.servers if host.servers is not None else {}
    server = servers.get(name)
    if server is None:
        raise _unknown(404, "unknown_server", "server", name, list(servers))
    if not uses_oauth(server):
        raise OpError(
            409,
            "not_oauth",
            f'server {name!r} does not use OAuth; give it "auth": {{"type": "oauth"}}',
        )
    assert isinstance(server, RemoteServer)
    return sign_ins, server


def _auth_failed(error: Exception) -> OpError:
    from mcpx.auth.flow import NetworkError
    from mcpx.auth.metadata import AuthorizationError

    if isinstance(error, NetworkError):
        return OpError(502, "auth_server_unreachable", str(error))
    if isinstance(error, AuthorizationError):
        return OpError(422, "sign_in_failed", str(error))
    return error_from(error)


async def auth_status(host: OpHost, call: Invocation) -> dict[str, Any]:
    from mcpx.auth.signin import uses_oauth

    if host.sign_ins is None:
        return {"servers": []}
    servers = host.servers.servers if host.servers is not None else {}
    names = [name for name, server in servers.items() if uses_oauth(server)]
    return {"servers": host.sign_ins.status(names)}


async def auth_begin(host: OpHost, call: Invocation) -> dict[str, Any]:
    sign_ins, server = _oauth_server(host, call.args["name"])
    try:
        return await sign_ins.begin(server.name, server, call.args["redirect_uri"])
    except Exception as error:
        raise _auth_failed(error) from error


async def auth_finish(host: OpHost, call: Invocation) -> dict[str, Any]:
    sign_ins, server = _oauth_server(host, call.args["name"])
    try:
        shown = await sign_ins.finish(server.name, call.args["url"])
    except Exception as error:
        raise _auth_failed(error) from error
    pool = host.pool
    if pool is not None and any(status.name == server.name for status in pool.status()):
        # The instance that failed without a token starts again with one.
        await pool.restart(server.name)
    return {"server": shown}


async def auth_logout(host: OpHost, call: Invocation) -> dict[str, Any]:
    sign_ins, server = _oauth_server(host, call.args["name"])
    return {"server": server.name, "forgotten": sign_ins.logout(server.name)}


async def reload(host: OpHost, call: Invocation) -> dict[str, Any]:
    pool = _pool(host)
    if host.reloads.read is None:
        raise OpError(
            503,
            "reload_unavailable",
            "this daemon cannot re-read its config file; restart it to apply changes",
        )
    try:
        return await host.reloads.run(
            host, lambda servers: Deferred.fromCoroutine(pool.reload(servers)), pool
        )
    except ReloadRefused as e:
        raise OpError(
            400,
            "invalid_config",
            f"{e}; the running configuration is kept: fix the config file and "
            "POST /v1/reload (or send SIGHUP) again",
        ) from None


async def get_settings(host: OpHost, call: Invocation) -> dict[str, Any]:
    settings = _settings(host)
    servers = host.servers if host.servers is not None else ServersConfig({}, "none")
    return render_json(settings, servers, state_dir=host.state_dir)


async def get_protocol(host: OpHost, call: Invocation) -> dict[str, Any]:
    return protocol_json(_settings(host).policy())


async def health(host: OpHost, call: Invocation) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "status": "ok",
        "version": __version__,
        "pid": host.pid,
        "uptime": round(host.clock.seconds() - host.started_at, 3),
    }
    if host.reloads.last is not None:
        answer["last_reload"] = host.reloads.last.to_json()
    return answer


async def events(host: OpHost, call: Invocation) -> EventFeed:
    keep_alive = 15.0
    if host.settings is not None:
        keep_alive = host.settings.duration("transport.sseKeepAlive")
    servers = tuple(split_filter(call.args.get("server", ())))
    kinds = tuple(split_filter(call.args.get("kind", ())))
    watched = list(dict.fromkeys(call.args.get("uri", ())))
    if not watched:
        return EventFeed(servers=servers, kinds=kinds, keep_alive=keep_alive)
    if len(watched) > MAX_WATCHED:
        raise OpError(
            400,
            "invalid_input",
            f"one event stream watches at most {MAX_WATCHED} resources, not {len(watched)}; "
            "open several streams",
            field="uri",
        )
    pool = _pool(host)
    held: list[tuple[str, str]] = []

    def release() -> None:
        for server, upstream in held:
            releasing = Deferred.fromCoroutine(
                pool.request(server, "resources/unsubscribe", {"uri": upstream}, client=call.client)
            )
            releasing.addErrback(_release_failed, server, upstream)

    try:
        subscribed, refused = await _watch(pool, call.client, watched, servers, held)
    except BaseException:
        release()  # the client went away while the subscriptions were being made
        raise
    return EventFeed(
        servers=servers or tuple(dict.fromkeys(server for server, _ in held)),
        kinds=kinds or ("resource.updated",),
        keep_alive=keep_alive,
        resources=tuple(held),
        watching={"subscribed": subscribed, "refused": refused},
        release=release,
    )


def _release_failed(failure: Failure, server: str, uri: str) -> None:
    _log.warn(
        "unsubscribing from {uri} on {server} failed: {why}",
        uri=uri,
        server=server,
        why=failure.getErrorMessage(),
    )


async def _watch(
    pool: PoolInterface,
    client: str,
    watched: Sequence[str],
    servers: Sequence[str],
    held: list[tuple[str, str]],
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """
    Subscribe to each URI for an event stream: an C{mcpx://} URI, or a bare upstream
    URI of the one server C{servers} names.

    @param held: gets each (server, upstream URI) pair subscribed, as it is.
    @return: what was subscribed, and what was not with why (as the stream's first
        event says).
    """
    from mcpx.server import uris

    subscribed: list[dict[str, str]] = []
    refused: list[dict[str, str]] = []
    for uri in watched:
        if uris.is_mcpx(uri):
            try:
                parsed = uris.parse(uri)
            except uris.NotAnMcpxUri as e:
                refused.append({"uri": uri, "reason": str(e)})
                continue
            server = parsed.server
            upstream = parsed.upstream()
            if parsed.from_template:
                try:
                    templates = await pool.templates(server, client=client)
                except Exception as e:
                    refused.append({"uri": uri, "reason": str(e)})
                    continue
                upstream = parsed.upstream(
                    str(t.get("uriTemplate")) for t in templates if t.get("uriTemplate")
                )
            if upstream is None:
                refused.append({"uri": uri, "reason": "no resource template of it gives it"})
                continue
        elif len(servers) == 1:
            server, upstream = servers[0], uri
        else:
            refused.append(
                {
                    "uri": uri,
                    "reason": "a URI that is not mcpx:// needs exactly one server= to say "
                    "whose it is",
                }
            )
            continue
        try:
            session = await pool.session(server, client)
            declaration = session.declaration
            if declaration is not None and not declaration.declares("resources.subscribe"):
                refused.append(
                    {
                        "uri": uri,
                        "reason": f"server {server!r} does not offer resource subscriptions",
                    }
                )
                continue
            await pool.request(server, "resources/subscribe", {"uri": upstream}, client=client)
        except CancelledError:
            raise
        except Exception as e:
            refused.append({"uri": uri, "reason": error_from(e).message})
            continue
        held.append((server, upstream))
        subscribed.append({"uri": uri, "server": server, "upstream": upstream})
    return subscribed, refused


async def openapi(host: OpHost, call: Invocation) -> dict[str, Any]:
    return _default_document()


def _scripts(host: OpHost) -> Scripts:
    if host.scripts is None:
        raise OpError(
            503,
            "exec_unavailable",
            "this daemon runs without its script runner; restart it with `mcpx daemon`",
        )
    return host.scripts


#: The HTTP status of each way a run can fail to finish.
_RUN_STATUS: Mapping[str, int] = {
    "timeout": 504,
    "output_too_large": 413,
    "too_many_calls": 429,
    "program_syntax": 400,
    "program_failed": 422,
    "program_crashed": 422,
    "cancelled": 409,
    "pool_unavailable": 503,
    "daemon_stopping": 503,
}


def outcome_json(outcome: RunOutcome) -> dict[str, Any]:
    """A finished run as C{/v1/exec} answers it."""
    body: dict[str, Any] = {
        "run": outcome.run,
        "output": outcome.output,
        "artifacts": outcome.artifacts,
    }
    if outcome.has_value:
        body["result"] = outcome.value
    elif outcome.shown is not None:
        body["text"] = outcome.shown
    return body


def _too_many_runs(error: TooManyRuns) -> OpError:
    return OpError(
        429,
        "too_many_runs",
        f"{error.limit} programs are running already (exec.maxRuns); try again when one ends",
        retry_in=1.0,
    )


async def _run_to_its_end(
    scripts: Scripts, call: Invocation, run_id: str | None = None
) -> dict[str, Any]:
    args = call.args
    try:
        outcome = await scripts.execute(
            args["program"],
            identity=call.client,
            owner=call.owner,
            caller=call.caller,
            timeout=args.get("timeoutSec"),
            inputs=args.get("inputs"),
            run_id=run_id,
        )
    except TooManyRuns as e:
        raise _too_many_runs(e) from None
    except RunFailed as e:
        raise OpError(_RUN_STATUS.get(e.code, 500), e.code, str(e)) from None
    return outcome_json(outcome)


async def run_program(host: OpHost, call: Invocation) -> Any:
    scripts = _scripts(host)
    if not call.args.get("task"):
        return await _run_to_its_end(scripts, call)
    # A task: the run's id is made first, so the answer can name it and the questions
    # its program causes can be found under it (GET /v1/questions?run=) from the start.
    try:
        scripts.check_room()
    except TooManyRuns as e:
        raise _too_many_runs(e) from None
    run_id = scripts.new_run_id()
    task = host.tasks.start(
        lambda: _run_to_its_end(scripts, call, run_id),
        _task_error,
        client=call.client,
        tool="mcpx_exec",
    )
    return Reply(
        {"task": {"id": task.id, "status": task.status.value}, "run": run_id},
        status=202,
        headers={"location": f"/v1/tasks/{task.id}"},
    )


async def list_artifacts(host: OpHost, call: Invocation) -> dict[str, Any]:
    store = _scripts(host).artifacts
    return {"artifacts": store.listed(call.client) if store is not None else []}


async def read_artifact(host: OpHost, call: Invocation) -> dict[str, Any]:
    store = _scripts(host).artifacts
    args = call.args
    uri = args["uri"]
    settings = host.settings
    limit = 64 * 1024 * 1024 if settings is None else settings.integer("transport.maxMessageSize")
    chunk = 4 * 1024 * 1024 if settings is None else settings.integer("exec.artifactChunk")
    try:
        if store is None:
            raise UnknownArtifact(uri)
        if "offset" not in args and "length" not in args:
            return {"contents": [store.read(call.client, uri, limit)]}
        offset = args.get("offset", 0)
        content, returned, size = store.read_range(
            call.client, uri, offset, min(args.get("length", chunk), chunk)
        )
    except UnknownArtifact:
        raise OpError(
            404,
            "unknown_artifact",
            f"no artifact {uri!r} of caller {call.client!r}: it never existed, belongs to "
            "another caller, or was removed after exec.artifactRetention",
        ) from None
    except ValueError as e:
        raise OpError(413, "artifact_too_large", str(e)) from None
    answer: dict[str, Any] = {
        "contents": [content],
        "offset": min(offset, size),
        "length": returned,
        "size": size,
    }
    if offset + returned < size:
        answer["next"] = offset + returned
    return answer


# -- The table -----------------------------------------------------------------------------

_REF = {
    "oneOf": [
        _object({"type": {"const": "ref/prompt"}, "name": _NAME}, ["type", "name"]),
        _object({"type": {"const": "ref/resource"}, "uri": _NAME}, ["type", "uri"]),
    ]
}

AUTH_STATE = _object(
    {
        "server": _NAME,
        "state": {"enum": ["signed_in", "signed_out", "needs_sign_in"]},
        "issuer": {"type": "string"},
        "resource": {"type": "string"},
        "scopes": _STRINGS,
        "expires_at": {"type": ["number", "null"]},
        "refreshable": {"type": "boolean"},
    },
    ["server", "state"],
)

OPS: tuple[Op, ...] = (
    Op(
        name="list_servers",
        summary="List the configured servers and their state",
        method="GET",
        path="/v1/servers",
        input_schema=NO_INPUT,
        output_schema=_object({"servers": {"type": "array", "items": SERVER_STATUS}}, ["servers"]),
        handler=list_servers,
        errors=(503,),
    ),
    Op(
        name="list_tools",
        summary="List tools, of every server or one, optionally searching their text",
        description="search keeps the tools whose name, title and description contain every "
        "word given. A server that cannot be reached is listed under errors. Titles and "
        "descriptions are the servers' own words, passed on unverified.",
        method="GET",
        path="/v1/tools",
        input_schema=_object(
            {
                "server": {**_NAME, "description": "Only this server's tools."},
                "search": {"type": "string", "description": "Words to look for."},
            }
        ),
        output_schema=_object(
            {
                "tools": {"type": "array", "items": TOOL_SUMMARY},
                "errors": {
                    "type": "array",
                    "items": _object({"server": _NAME, "error": ERROR_OBJECT}, ["server", "error"]),
                },
            },
            ["tools"],
        ),
        handler=list_tools,
        tag="tools",
        errors=(404, 422, 502, 503, 504),
        uses_client=True,
    ),
    Op(
        name="describe_tool",
        summary="Describe one tool: its full definition, input schema included",
        description="The definition is the server's own: its annotations (readOnlyHint, "
        "destructiveHint, ...) are the server's claims, passed on unverified.",
        method="GET",
        path="/v1/tools/{server}/{tool}",
        input_schema=_object({"server": _NAME, "tool": _NAME}, ["server", "tool"]),
        output_schema=_object(
            {"server": _NAME, "tool": {"type": "object", "required": ["name", "inputSchema"]}},
            ["server", "tool"],
        ),
        handler=describe_tool,
        tag="tools",
        errors=(404, 422, 502, 503, 504),
        uses_client=True,
    ),
    Op(
        name="call_tool",
        summary="Call a tool",
        description='With "task": true the answer is 202 and a task to collect from '
        'GET /v1/tasks/{id}; with "progress": true it is NDJSON: progress lines, then one '
        "result or error line. The timeout is clamped to pool.callTimeout. A question the "
        "server asks during the call waits in GET /v1/questions with the call's call_id: "
        'the one given, else the task\'s id with "task": true, else one mcpx makes up.',
        method="POST",
        path="/v1/call",
        input_schema=_object(
            {
                "server": _NAME,
                "tool": _NAME,
                "arguments": {"type": "object"},
                "timeout": {"type": "number", "exclusiveMinimum": 0},
                "task": {"type": "boolean"},
                "progress": {"type": "boolean"},
                "call_id": {
                    "type": "string",
                    "pattern": CALL_ID_PATTERN,
                    "description": "Names the call on the questions its server asks during "
                    "it (their call_id), so the caller can find and answer its own.",
                },
            },
            ["server", "tool"],
        )
        | {
            "not": exclusive_flags(
                "task",
                "progress",
                why='a task cannot stream progress; drop "progress" or "task"',
            )
        },
        output_schema=CALL_TOOL_RESULT,
        accepted_schema=_object(
            {"task": _object({"id": _NAME, "status": TASK_STATUS}, ["id", "status"])}, ["task"]
        ),
        progress_schema={
            "oneOf": [
                _object({"progress": {"type": "object"}}, ["progress"]),
                _object({"result": CALL_TOOL_RESULT}, ["result"]),
                _object({"error": ERROR_OBJECT}, ["error"]),
            ]
        },
        handler=call_tool,
        tag="tools",
        errors=(403, 404, 422, 429, 502, 503, 504),
        uses_client=True,
    ),
    Op(
        name="get_task",
        summary='Collect a task started with "task": true',
        method="GET",
        path="/v1/tasks/{id}",
        input_schema=_object({"id": _NAME}, ["id"]),
        output_schema=TASK,
        handler=get_task,
        tag="tools",
        errors=(404,),
        gateway=False,
    ),
    Op(
        name="list_tasks",
        summary="List the tasks running or kept for collection, oldest first",
        description="Every task of the daemon: /v1/call's, the task-augmented MCP calls of "
        "hosts, and MCP calls kept after their client was asked a question (origin says "
        "which). server, state and client keep only those tasks. The results themselves "
        "are collected from GET /v1/tasks/{id}.",
        method="GET",
        path="/v1/tasks",
        input_schema=_object(
            {
                "server": {**_NAME, "description": "Only the tasks calling this server."},
                "state": {**TASK_STATUS, "description": "Only the tasks in this state."},
                "client": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Only the tasks of this caller identity.",
                },
            }
        ),
        output_schema=_object({"tasks": {"type": "array", "items": TASK_SUMMARY}}, ["tasks"]),
        handler=list_tasks,
        tag="tools",
        gateway=False,
    ),
    Op(
        name="cancel_task",
        summary="Cancel a running task",
        description="The task is cancelled at once and its upstream request with it; a task "
        "that already finished answers 409.",
        method="POST",
        path="/v1/tasks/{id}/cancel",
        input_schema=_object({"id": _NAME}, ["id"]),
        output_schema=TASK,
        handler=cancel_task,
        tag="tools",
        errors=(404, 409),
        gateway=False,
    ),
    Op(
        name="exec",
        summary="Run a program that calls the configured servers' tools",
        description="The program is Python (the subset a sandboxed interpreter runs: no "
        "files but /out, no network, no processes). Each server is a name and each tool an "
        'async method: `await demo.add(a=2, b=40)`; `await stubs("demo")` shows a '
        "server's tools. Its last expression is the result; what it prints is the output. "
        'exec.timeout bounds the run (timeoutSec may lower it). On /v1, with "task": '
        "true the answer is 202 with the task and the run's id at once: the run's questions "
        "wait in GET /v1/questions?run=<run>, its result in GET /v1/tasks/{id}, and "
        "POST /v1/tasks/{id}/cancel stops it.",
        method="POST",
        path="/v1/exec",
        input_schema=_object(
            {
                "program": {"type": "string", "minLength": 1, "maxLength": 1024 * 1024},
                "timeoutSec": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Seconds the run may take; clamped to exec.timeout.",
                },
                "inputs": {
                    "type": "object",
                    "description": "Variables the program starts with, by name (each name "
                    "an ASCII identifier).",
                    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                },
                "task": {
                    "type": "boolean",
                    "description": "Run it as a task to collect later (/v1 only).",
                },
            },
            ["program"],
        ),
        accepted_schema=_object(
            {
                "task": _object({"id": _NAME, "status": TASK_STATUS}, ["id", "status"]),
                "run": _NAME,
            },
            ["task", "run"],
        ),
        output_schema=_object(
            {
                "run": _NAME,
                "output": {"type": "string"},
                "result": {},
                "text": {"type": "string"},
                "artifacts": {"type": "array", "items": {"type": "object"}},
            },
            ["run", "output", "artifacts"],
        ),
        handler=run_program,
        tag="exec",
        errors=(409, 413, 422, 429, 503, 504),
        uses_client=True,
    ),
    Op(
        name="list_artifacts",
        summary="List the files the caller's runs left (mcpx://artifacts/...)",
        method="GET",
        path="/v1/artifacts",
        input_schema=NO_INPUT,
        output_schema=_object(
            {"artifacts": {"type": "array", "items": {"type": "object"}}}, ["artifacts"]
        ),
        handler=list_artifacts,
        tag="exec",
        errors=(503,),
        uses_client=True,
        gateway=False,
    ),
    Op(
        name="read_artifact",
        summary="Read one of the caller's artifacts, whole or a range of its bytes",
        description="Without offset and length the artifact comes whole (text, or a base64 "
        "blob), up to transport.maxMessageSize. With either, `length` bytes from `offset` "
        "come as a base64 blob, at most exec.artifactChunk of them; `next` is where the "
        "following range starts, absent at the end.",
        method="POST",
        path="/v1/artifacts/read",
        input_schema=_object(
            {
                "uri": _NAME,
                "offset": {"type": "integer", "minimum": 0},
                "length": {"type": "integer", "minimum": 1},
            },
            ["uri"],
        ),
        output_schema=_object(
            {
                "contents": {"type": "array", "items": {"type": "object"}},
                "offset": {"type": "integer"},
                "length": {"type": "integer"},
                "size": {"type": "integer"},
                "next": {"type": "integer"},
            },
            ["contents"],
        ),
        handler=read_artifact,
        tag="exec",
        errors=(404, 413, 503),
        uses_client=True,
        gateway=False,
    ),
    Op(
        name="get_prompt",
        summary="Get a prompt, with its arguments filled in",
        method="POST",
        path="/v1/prompt",
        input_schema=_object(
            {
                "server": _NAME,
                "name": _NAME,
                "arguments": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            ["server", "name"],
        ),
        output_schema=_object(
            {"description": {"type": "string"}, "messages": {"type": "array"}},
            ["messages"],
            closed=False,
            description="The upstream server's GetPromptResult.",
        ),
        handler=get_prompt,
        tag="prompts",
        errors=(404, 422, 502, 503, 504),
        uses_client=True,
    ),
    Op(
        name="read_resource",
        summary="Read a resource",
        method="POST",
        path="/v1/read",
        input_schema=_object({"server": _NAME, "uri": _NAME}, ["server", "uri"]),
        output_schema=_object(
            {"contents": {"type": "array", "items": {"type": "object"}}},
            ["contents"],
            closed=False,
            description="The upstream server's ReadResourceResult.",
        ),
        handler=read_resource,
        tag="resources",
        errors=(404, 422, 502, 503, 504),
        uses_client=True,
    ),
    Op(
        name="complete",
        summary="Complete a prompt argument or a resource template variable",
        description="Forwarded as completion/complete to a server that declared "
        'completions; otherwise answered from the cached catalogue with "source": "cache" '
        "and the reason.",
        method="POST",
        path="/v1/complete",
        input_schema=_object(
            {
                "server": _NAME,
                "ref": _REF,
                "argument": _object(
                    {"name": _NAME, "value": {"type": "string"}}, ["name", "value"]
                ),
                "context": _object(
                    {"arguments": {"type": "object", "additionalProperties": {"type": "string"}}}
                ),
            },
            ["server", "ref", "argument"],
        ),
        output_schema=_object(
            {
                "completion": COMPLETION,
                "source": {"type": "string", "enum": ["upstream", "cache"]},
                "reason": {"type": "string"},
            },
            ["completion", "source"],
        ),
        handler=complete,
        tag="prompts",
        errors=(404, 422, 502, 503, 504),
        uses_client=True,
    ),
    Op(
        name="list_questions",
        summary="List the questions upstream servers asked: the pending ones by default",
        description="state keeps the questions in that state; all=true lists every question "
        "still kept, finished ones included (they are kept proto.askTTL). kind says what "
        "is asked: elicitation, sampling or roots. run keeps those of one /v1/exec run.",
        method="GET",
        path="/v1/questions",
        input_schema=_object(
            {
                "state": {
                    "type": "string",
                    "enum": [state.value for state in QuestionState],
                    "description": "Only the questions in this state.",
                },
                "all": {
                    "type": "string",
                    "enum": ["true", "false"],
                    "description": "true: every kept question, not just the pending ones.",
                },
                "run": {
                    **_NAME,
                    "description": 'Only the questions of this mcpx_exec run (/v1/exec\'s "run").',
                },
            }
        ),
        output_schema=_object({"questions": {"type": "array", "items": QUESTION}}, ["questions"]),
        handler=list_questions,
        tag="questions",
        errors=(503,),
        gateway=False,
    ),
    Op(
        name="get_question",
        summary="One question, pending or finished",
        method="GET",
        path="/v1/questions/{id}",
        input_schema=_object({"id": _NAME}, ["id"]),
        output_schema=QUESTION,
        handler=get_question,
        tag="questions",
        errors=(404, 503),
        gateway=False,
    ),
    Op(
        name="answer_question",
        summary="Answer a pending question: accept (with content or result), decline or cancel",
        description='An elicitation is accepted with "content", the values its requestedSchema '
        'asks for (none in url mode); sampling with "result", a CreateMessageResult; roots '
        'with "result", {"roots": [...]}. An answer that does not fit the question is '
        "refused with 400 invalid_answer and the question stays pending; a question that "
        "is no longer pending answers 409. The answer is the question as it now stands.",
        method="POST",
        path="/v1/questions/{id}/answer",
        input_schema=_object(
            {
                "id": _NAME,
                "action": {"type": "string", "enum": list(ANSWER_ACTIONS)},
                "content": {
                    "type": "object",
                    "description": "An elicitation's values, when accepting.",
                },
                "result": {
                    "type": "object",
                    "description": "The sampling or roots result, when accepting.",
                },
                "by": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 64,
                    "description": "Who answers, recorded with the answer.",
                    "default": DEFAULT_ANSWERER,
                },
            },
            ["id", "action"],
        ),
        output_schema=QUESTION,
        handler=answer_question,
        tag="questions",
        errors=(404, 409, 503),
        gateway=False,
    ),
    Op(
        name="restart_server",
        summary="Restart a server's running instances",
        method="POST",
        path="/v1/servers/{name}/restart",
        input_schema=_object({"name": _NAME}, ["name"]),
        output_schema=_object({"server": SERVER_STATUS}, ["server"]),
        handler=restart_server,
        errors=(404, 503),
        gateway=False,
    ),
    Op(
        name="auth_status",
        summary="Show each OAuth server's sign-in: signed in or not, issuer, scopes, expiry",
        method="GET",
        path="/v1/auth",
        input_schema=NO_INPUT,
        output_schema=_object({"servers": {"type": "array", "items": AUTH_STATE}}, ["servers"]),
        handler=auth_status,
        gateway=False,
    ),
    Op(
        name="auth_begin",
        summary="Begin signing in to an OAuth server: the URL for the browser",
        description="redirect_uri is where the browser is sent back to (mcpx auth login "
        "listens on 127.0.0.1); finish with POST /v1/auth/{name}/finish.",
        method="POST",
        path="/v1/auth/{name}/begin",
        input_schema=_object(
            {"name": _NAME, "redirect_uri": {"type": "string", "pattern": "^https?://"}},
            ["name", "redirect_uri"],
        ),
        output_schema=_object(
            {"url": {"type": "string"}, "state": {"type": "string"}, "issuer": {"type": "string"}},
            ["url", "state", "issuer"],
        ),
        handler=auth_begin,
        errors=(404, 409, 422, 502, 503),
        gateway=False,
    ),
    Op(
        name="auth_finish",
        summary="Finish signing in with the URL the browser was redirected to",
        method="POST",
        path="/v1/auth/{name}/finish",
        input_schema=_object({"name": _NAME, "url": {"type": "string"}}, ["name", "url"]),
        output_schema=_object({"server": AUTH_STATE}, ["server"]),
        handler=auth_finish,
        errors=(404, 409, 422, 502, 503),
        gateway=False,
    ),
    Op(
        name="auth_logout",
        summary="Forget an OAuth server's tokens and registered clients",
        method="DELETE",
        path="/v1/auth/{name}",
        input_schema=_object({"name": _NAME}, ["name"]),
        output_schema=_object(
            {"server": _NAME, "forgotten": {"type": "integer"}}, ["server", "forgotten"]
        ),
        handler=auth_logout,
        errors=(404, 409, 503),
        gateway=False,
    ),
    Op(
        name="reload",
        summary="Re-read the config file's servers and apply the differences",
        method="POST",
        path="/v1/reload",
        input_schema=NO_INPUT,
        output_schema=_object(
            {
                **{key: _STRINGS for key in ("removed", "added", "changed", "unchanged")},
                "settings": _object(
                    {"applied": _STRINGS, "restart_needed": _STRINGS},
                    ["applied", "restart_needed"],
                ),
            },
            ["removed", "added", "changed", "unchanged"],
        ),
        handler=reload,
        errors=(400, 503),
        gateway=False,
    ),
    Op(
        name="get_settings",
        summary="Every setting, its value and where it came from (mcpx settings --json)",
        method="GET",
        path="/v1/settings",
        input_schema=NO_INPUT,
        output_schema=_object(
            {
                "settings": {"type": "array", "items": {"type": "object"}},
                "policy": {"type": "object"},
                "servers": {"type": "object"},
                "config": _NULLABLE_STRING,
                "configOrigin": {"type": "string"},
                "stateDir": {"type": "string"},
            },
            ["settings", "policy", "servers", "config", "configOrigin", "stateDir"],
        ),
        handler=get_settings,
        tag="daemon",
        errors=(503,),
        gateway=False,
    ),
    Op(
        name="get_protocol",
        summary="The protocol matrix: revisions, features, and the conflict policy in force",
        method="GET",
        path="/v1/protocol",
        input_schema=NO_INPUT,
        output_schema=_object(
            {
                "revisions": {"type": "array"},
                "kinds": _STRINGS,
                "extensions": _STRINGS,
                "features": {"type": "array"},
                "spec": {"type": "object"},
            },
            ["revisions", "kinds", "extensions", "features", "spec"],
        ),
        handler=get_protocol,
        tag="daemon",
        errors=(503,),
        gateway=False,
    ),
    Op(
        name="health",
        summary="Whether the daemon is up: version, pid, uptime",
        method="GET",
        path="/health",
        input_schema=NO_INPUT,
        output_schema=_object(
            {
                "status": {"const": "ok"},
                "version": {"type": "string"},
                "pid": {"type": "integer"},
                "uptime": {"type": "number", "minimum": 0},
                "last_reload": _object(
                    {
                        "at": {"type": "number"},
                        "ok": {"type": "boolean"},
                        "error": {"type": ["string", "null"]},
                    },
                    ["at", "ok", "error"],
                ),
            },
            ["status", "version", "pid", "uptime"],
        ),
        handler=health,
        tag="daemon",
        gateway=False,
    ),
    Op(
        name="events",
        summary="Stream the daemon's events as server-sent events",
        description="server and kind filter the stream; each may be repeated or "
        "comma-separated, and a kind such as server.* (or server) names a family. Comments "
        "keep the stream alive every transport.sseKeepAlive; a consumer too slow to keep "
        "up is sent a final dropped event and disconnected. uri (repeatable, at most 64) "
        "watches resources: an mcpx:// URI, or a server's own URI with one server=; the "
        "stream holds their subscriptions while it is open, its first event (watching) "
        "says what was subscribed and why anything was not, and it then carries their "
        "resource.updated events (and the kinds asked for).",
        method="GET",
        path="/v1/events",
        input_schema=_object({"server": _STRINGS, "kind": _STRINGS, "uri": _STRINGS}),
        output_schema=EVENT,
        handler=events,
        tag="daemon",
        media=Media.EVENT_STREAM,
        gateway=False,
    ),
    Op(
        name="openapi",
        summary="This API, as an OpenAPI 3.1 document",
        method="GET",
        path="/openapi.json",
        input_schema=NO_INPUT,
        output_schema=_object(
            {
                "openapi": {"type": "string"},
                "info": {"type": "object"},
                "paths": {"type": "object"},
            },
            ["openapi", "info", "paths"],
            closed=False,
        ),
        handler=openapi,
        tag="daemon",
        gateway=False,
    ),
)

BY_NAME: Mapping[str, Op] = {op.name: op for op in OPS}


# -- The OpenAPI document ------------------------------------------------------------------

_STATUS_TEXT = {
    200: "OK",
    202: "Accepted: a task to collect later",
    400: "Invalid input: the error names the field",
    401: "This connection needs the daemon's token (Authorization: Bearer; mcpx token)",
    403: "A foreign Origin or Host: the request did not come from a page or name of this daemon",
    404: "Unknown server, tool, prompt, task or question, or a resource the upstream server "
    "does not have (rpc holds its error)",
    409: "The question is no longer pending: answered, declined, cancelled or expired",
    422: "The upstream server refused the input as invalid, for instance an unknown tool or "
    "wrong arguments (rpc holds its error)",
    415: "The body was not sent as Content-Type: application/json",
    429: "The caller holds as many tasks as it may; Retry-After says when to try again",
    500: "The daemon failed unexpectedly",
    502: "The upstream server answered with an error (under rpc) or failed",
    503: "The server (or the pool) is unavailable; retry_in says when to try again",
    504: "The upstream server did not answer in time",
}

_CLIENT_HEADER = {
    "name": "Mcpx-Client",
    "in": "header",
    "required": False,
    "description": "Who is calling; servers with scope client get one instance per caller.",
    "schema": {"type": "string", "default": DEFAULT_CLIENT},
}


def _error_response(status: int) -> dict[str, Any]:
    return {
        "description": _STATUS_TEXT.get(status, "Error"),
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _operation(op: Op) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": op.properties[name]}
        for name in op.path_params
    ]
    for name in op.query_params:
        schema = op.properties[name]
        parameter: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in op.required,
            "schema": schema,
        }
        if schema.get("type") == "array":
            parameter.update(style="form", explode=True)
        parameters.append(parameter)
    if op.uses_client:
        parameters.append(_CLIENT_HEADER)
    success: dict[str, Any] = {"description": _STATUS_TEXT[200], "content": {}}
    success["content"][op.media.value] = {"schema": op.output_schema}
    if op.progress_schema is not None:
        success["content"][NDJSON] = {"schema": op.progress_schema}
    responses: dict[str, Any] = {"200": success}
    if op.accepted_schema is not None:
        responses["202"] = {
            "description": _STATUS_TEXT[202],
            "content": {"application/json": {"schema": op.accepted_schema}},
        }
    # Every route is behind the daemon's gate (mcpx.daemon.gate): these come from it.
    gate = {
        403,
        *((415,) if op.method == "POST" else ()),
        *(() if op.path == "/health" else (401,)),
    }
    statuses = sorted({*op.errors, *((400,) if op.properties else ()), *gate})
    for status in statuses:
        responses[str(status)] = _error_response(status)
    responses["default"] = _error_response(500)
    operation: dict[str, Any] = {
        "operationId": op.name,
        "summary": op.summary,
        "tags": [op.tag],
        "responses": responses,
    }
    if op.description:
        operation["description"] = op.description
    if parameters:
        operation["parameters"] = parameters
    if op.body_params:
        body = _object(
            {name: op.properties[name] for name in op.body_params},
            [name for name in op.required if name in op.body_params],
        )
        if "not" in op.input_schema:
            # A constraint across body fields (exclusive_flags) belongs to the body.
            body["not"] = op.input_schema["not"]
        operation["requestBody"] = {
            "required": bool(body.get("required")),
            "content": {"application/json": {"schema": body}},
        }
    return operation


@functools.cache
def _default_document() -> dict[str, Any]:
    return openapi_document(OPS)


def openapi_document(ops: Sequence[Op] = OPS) -> dict[str, Any]:
    """The OpenAPI 3.1 document describing C{ops}: one path item entry per op."""
    paths: dict[str, dict[str, Any]] = {}
    for op in ops:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "mcpx daemon",
            "version": __version__,
            "description": "The mcpx gateway's HTTP API: the configured MCP servers, kept "
            "warm, offered over REST. Errors are JSON with a stable code and a message "
            "that says what to do.",
        },
        "tags": [{"name": tag} for tag in dict.fromkeys(op.tag for op in ops)],
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR_SCHEMA},
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The daemon's token (mcpx token). Not needed on the unix "
                    "socket, nor on loopback from the daemon's own user with daemon.auth peer.",
                }
            },
        },
        # Either no credentials (the owner) or the bearer token.
        "security": [{}, {"bearer": []}],
    }
