# -*- test-case-name: tests.server.test_ext_tasks -*-
"""
The one way a host's call that goes upstream travels through the MCP server:
C{tools/call}, C{prompts/get} and C{resources/read} (L{Calling.method}).

In order, once each:

  1. the route: the pass-through server a C{tools/call} goes to
     (L{mcpx.server.passthrough_routes.Routes.tool_route}), handed to everything after;
  2. the call's C{Mcp-Param-*} headers against its arguments, where the transport
     handed headers over (L{Context.headers}, L{mcpx.server.param_headers});
  3. a sign-in offered to a host that can show a URL (L{SignInOffers.offering});
  4. a task or not: a 2026-07-28 client that declared the tasks extension may be
     answered with a task (L{TaskPromotion.call_may_become_task}), a legacy client's
     C{params.task} is a core task at once (L{TaskPromotion.create_core}), a tool that
     runs only as a task is C{-32021} to a client that declared neither;
  5. the call (L{Asking.call_for}) and the call forwarded, its questions asked as its
     client's revision has them (L{Asking.asked});
  6. the call ended once its work settles, and for a strict call the C{-32021} one
     of its questions was refused with (L{settled}), whichever of the ways above it ran;
  7. an upstream's C{-32042} answered as the host's revision has it
     (L{url_required_answer}).

A new method whose upstream may ask is one more line in L{mcpx.server.dispatch.McpServer}'s
method table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from attrs import frozen
from twisted.internet.interfaces import IReactorTime

from mcpx import tracing
from mcpx.call import Call
from mcpx.server.asking import Asking
from mcpx.server.conn import Conn, Context
from mcpx.server.ext_tasks import REQUIRED as TASKS_REQUIRED
from mcpx.server.ext_tasks import client_declares
from mcpx.server.gateway_tools import CALL_TOOL
from mcpx.server.offering import Offering
from mcpx.server.param_headers import check_headers
from mcpx.server.passthrough import PassThrough
from mcpx.server.passthrough_routes import FETCH, ToolRoute
from mcpx.server.promotion import TaskPromotion
from mcpx.server.resumable import ResumableCall
from mcpx.server.roots import Roots
from mcpx.server.sign_in_offers import SignInOffers, url_required_answer, without_upstream_urls
from mcpx.wire.errors import RpcError

#: A call's params, and the route a C{tools/call} takes (C{None} for the rest).
Params = dict[str, Any]
Route = ToolRoute | None
#: The pass-through serving a call's connection, where it was found in the same
#: synchronous step as the call's forward (L{Forward}); else C{None}.
Served = PassThrough | None

#: Forwards one call upstream (or to the gateway): its connection, its context (with
#: its call), its params, its route and the pass-through found serving the connection
#: in the same synchronous step (C{None}: not found so, to be looked up).
Forward = Callable[[Conn, Context, Params, Route, Served], Awaitable[Mapping[str, Any]]]

#: Spells a result built in the newest shape for C{method} and the request's revision.
Spell = Callable[[Mapping[str, Any], str, Context], Any]


async def settled(call: Call, work: Awaitable[Mapping[str, Any]]) -> Mapping[str, Any]:
    """
    C{work}'s result for C{call}, which ends with it (L{Call.ended}); for a strict
    call (L{Call.strict}), failing with the -32021 a question of its upstream was
    refused with, whatever the upstream answered after the refusal.
    """
    try:
        result = await work
    except Exception:
        if call.refused is not None:
            raise call.refused from None
        raise
    finally:
        call.ended()
    if call.refused is not None:
        raise call.refused
    return result


@frozen
class Calling:
    """The parts of one MCP server its calls that go upstream pass (see the module)."""

    offering: Offering
    asking: Asking
    sign_ins: SignInOffers
    roots: Roots
    promotion: TaskPromotion | None
    spell: Spell
    clock: IReactorTime

    def method(self, method: str, forward: Forward) -> _Way:
        """The server's method C{method}: its calls through the pipeline to C{forward}."""
        return _Way(self, method, forward)


@frozen
class _Way:
    """One method through the pipeline (L{Calling.method}): the server calls it."""

    parts: Calling
    method: str
    forward: Forward

    async def __call__(self, conn: Conn, context: Context, params: Params) -> Any:
        if context.modern and "inputResponses" in params:
            params = without_upstream_urls(params)
        try:
            if self.method != "tools/call":
                return await self._inline(conn, context, params, None)
            # The route, found once; the Mcp-Param-* headers the transport handed over
            # checked against the arguments.
            route: Route = None
            passthrough = self.parts.offering.serving(conn)
            # The pass-through handed to the forward, found now: nothing is awaited
            # between this and the forward on the way at once (no fetch, no sign-in,
            # no task); else looked up again there.
            served: Served = None
            name = params.get("name")
            if passthrough is not None and isinstance(name, str):
                routes = passthrough.routes
                now = routes.tool_route_now(context, name)
                if now is FETCH:
                    # Not handed on: a reload may come while the catalogues are fetched.
                    route = await routes.tool_route(context, name)
                else:
                    route = now
                    served = passthrough
                headers = context.headers
                if headers is not None and route is not None and route.headers:
                    check_headers(route.headers, params.get("arguments"), headers)
            if name == CALL_TOOL:
                # Called once the client signed in, maybe after a reload: looked up then.
                sign_ins = self.parts.sign_ins
                due = sign_ins.due(context, params)
                if due is not None:
                    return await sign_ins.offering(
                        conn,
                        context,
                        due,
                        lambda params: self._tasked(conn, context, params, route),
                    )
            # Looked up once for the request: its Call is made knowing it (L{_inline}).
            return await self._tasked(
                conn, context, params, route, narrow=passthrough is not None, served=served
            )
        except RpcError as error:
            answer = url_required_answer(error, context, self.method)
            if answer is None:
                raise
            return answer

    def _tasked(
        self,
        conn: Conn,
        context: Context,
        params: Params,
        route: Route,
        *,
        narrow: bool | None = None,
        served: Served = None,
    ) -> Awaitable[Mapping[str, Any]]:
        """
        A C{tools/call}, as a task where its client and its tool want one, else inline.

        @param served: the pass-through serving C{conn}, found in this synchronous step
            (L{Forward}): handed to the forward of an inline call, which runs in it too.
        """
        promotion = self.parts.promotion
        if promotion is not None:
            if context.modern:
                # Most calls declare no extensions: client_declares is not asked.
                if "extensions" in context.capabilities and client_declares(context):
                    return self._extension(conn, context, params, route, promotion)
                if route is not None and route.task_support == "required":
                    # Only the extension can carry a tool that runs as a task only.
                    raise RpcError.missing_client_capability(TASKS_REQUIRED)
            elif "task" in params and context.task is None:
                return self._core(conn, context, params, route, promotion)
        return self._inline(conn, context, params, route, narrow=narrow, served=served)

    async def _core(
        self, conn: Conn, context: Context, params: Params, route: Route, promotion: TaskPromotion
    ) -> Mapping[str, Any]:
        """
        2025-11-25 core tasks, honoured from any legacy client: {task} at once; the
        task's call is this method again, without its task.
        """
        with tracing.span("mcpx.task.promotion", {"mcpx.task.kind": "core"}):
            return await promotion.create_core(
                conn,
                context,
                params,
                lambda conn, context, params: self._inline(conn, context, params, route),
                route,
            )

    def _inline(
        self,
        conn: Conn,
        context: Context,
        params: Params,
        route: Route,
        *,
        narrow: bool | None = None,
        served: Served = None,
    ) -> Awaitable[Mapping[str, Any]]:
        """
        A call answered by its request: its L{Call} built, the call forwarded and its
        questions asked.  A plain function: the common call, with no L{Call}, costs no
        extra frame.

        @param narrow: whether the connection is served a pass-through, where the
            request looked already (L{Asking.call_for}); C{None}: looked up.
        @param served: the pass-through serving C{conn}, found in this synchronous step,
            for the forward (L{Forward}); C{None}: it looks it up.
        """
        asking, method = self.parts.asking, self.method
        if context.modern and "requestState" in params:
            return asking.resume(context, params, method)
        if method == "tools/call" and params.get("name") == CALL_TOOL:
            target = params.get("arguments")
            server = target.get("server") if type(target) is dict else None
            if type(server) is str:
                self.parts.roots.uses(conn, (server,))
        call = asking.call_for(conn, context, params, method, narrow=narrow)
        if call is None:
            return self.forward(conn, context, params, route, served)
        context = context.with_call(call)
        forwarded = settled(call, self.forward(conn, context, params, route, served))
        if call.asker is None:
            return forwarded
        return asking.asked(conn, forwarded, context, params, method)

    async def _extension(
        self, conn: Conn, context: Context, params: Params, route: Route, promotion: TaskPromotion
    ) -> Mapping[str, Any]:
        """
        A 2026-07-28 C{tools/call} from a client that declared the tasks extension
        (L{TaskPromotion.call_may_become_task}); its task's result is kept spelled as
        the request's revision has it.
        """

        def spell(result: Mapping[str, Any]) -> Any:
            return self.parts.spell(result, "tools/call", context)

        if not isinstance(params.get("name"), str):
            raise RpcError.invalid_params("params.name must be a string")
        if "requestState" in params:
            return await promotion.call_may_become_task(
                conn, context, params, route, spell, fresh=None
            )
        call = self.parts.asking.call_for(conn, context, params, "tools/call", as_task=True)
        assert call is not None
        context = context.with_call(call)
        asker = call.asker
        resumable = (
            asker
            if isinstance(asker, ResumableCall)
            else ResumableCall(call, "tools/call", self.parts.clock)
        )
        forwarded = settled(call, self.forward(conn, context, params, route, None))
        return await promotion.call_may_become_task(
            conn, context, params, route, spell, fresh=(call, resumable, forwarded)
        )
