# -*- test-case-name: tests.daemon.test_ops -*-
"""
One operation, declared once (L{Op}): its route, its input and output as JSON Schema,
and the coroutine that does the work.

From the table of them (L{mcpx.ops.table.OPS}) come the C{/v1} routes
(L{mcpx.daemon.api}), the OpenAPI document (L{mcpx.ops.openapi}) and the MCP gateway's
own tools, so the three can never disagree about what an operation takes.

Inputs are checked against the op's input schema with a validator compiled once, when
the table is built.  Outputs are not checked at run time (the tests do that): a proxied
call must stay cheap.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Awaitable, Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from attrs import Factory, field, frozen

from mcpx.ops.errors import OpError
from mcpx.ops.host import Invocation, OpHost
from mcpx.ops.routes import ROUTES
from mcpx.policy.precheck import fast_acceptor
from mcpx.spec.safe_schema import check_schema, dialect

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

Handler = Callable[[OpHost, Invocation], Awaitable[Any]]


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
        gateway tool's name; its method and path are those L{mcpx.ops.routes.ROUTES}
        gives it.
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
    @ivar owner_only: whether only the daemon's owner may run it: an op that changes what
        every caller gets (a reload, a restart, the settings, the shared sign-ins).  A
        caller let in with an access token's subject (C{daemon.auth} C{oauth}) is refused
        C{403 owner_only} by L{run}, on every route that reaches the op.
    """

    name: str
    summary: str
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
    owner_only: bool = False
    method: str = field(
        init=False, default=Factory(lambda self: ROUTES[self.name][0], takes_self=True)
    )
    path: str = field(
        init=False, default=Factory(lambda self: ROUTES[self.name][1], takes_self=True)
    )
    path_params: tuple[str, ...] = field(
        init=False,
        default=Factory(lambda self: tuple(re.findall(r"{(\w+)}", self.path)), takes_self=True),
    )

    @property
    def accepts(self) -> Callable[[Mapping[str, Any]], bool] | None:
        """The quick yes for this op's input (L{fast_acceptor}), made at its first input."""
        return _acceptor(self)

    @property
    def validator(self) -> Validator:
        """The input schema compiled, at the first input the fast check did not accept."""
        return _validator(self)

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

    async def run(self, host: OpHost, call: Invocation) -> Any:
        """
        Run the op for C{call}: the one way every route (C{/v1}, the MCP gateway's tools)
        runs one, so who may run it is decided here alone.

        @raise OpError: C{403 owner_only} when the op is the owner's and the caller is not.
        """
        if self.owner_only and not call.by_owner:
            raise OpError(
                403,
                "owner_only",
                f"{self.name} is the daemon owner's alone: a caller let in with an access "
                "token cannot run it; the owner runs it on the daemon's unix socket "
                "(the mcpx command)",
            )
        return await self.handler(host, call)

    def check(self, args: Mapping[str, Any]) -> None:
        """
        Refuse input that does not match the input schema.

        @raise OpError: C{400 invalid_input}, naming the field at fault.
        """
        if self.accepts is not None and self.accepts(args):
            return
        from jsonschema.exceptions import best_match  # loaded by self.validator, just below

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


@cache
def _acceptor(op: Op) -> Callable[[Mapping[str, Any]], bool] | None:
    # Deferred: a pattern in an op's schema is compiled by RE2, whose library (with the C++
    # runtime, about 2 MB of an idle daemon's memory) loads at the first pattern.
    return fast_acceptor(op.input_schema)


@cache
def _validator(op: Op) -> Validator:
    # Deferred: jsonschema (2-3 MB) loads at the first input the fast check leaves to it, not
    # in an idle daemon; tests.daemon.test_ops compiles every op's schema.
    validator_class = dialect("2020-12")
    check_schema(validator_class, op.input_schema)
    return validator_class(op.input_schema)


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
