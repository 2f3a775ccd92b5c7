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
  5. the caller (L{Asking.caller}) and the call forwarded, its questions asked as its
     client's revision has them (L{Asking.asked});
  6. for a strict caller, the C{-32021} one of its questions was refused with
     (L{strictly}), whichever of the ways above it ran;
  7. an upstream's C{-32042} answered as the host's revision has it
     (L{url_required_answer}).

A new method whose upstream may ask is one more line in L{mcpx.server.dispatch.McpServer}'s
method table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from attrs import evolve, frozen
from twisted.internet.interfaces import IReactorTime

from mcpx import tracing
from mcpx.questions.caller import Caller
from mcpx.server.asking import Asking
from mcpx.server.conn import Conn, Context, Method
from mcpx.server.ext_tasks import REQUIRED as TASKS_REQUIRED
from mcpx.server.ext_tasks import client_declares
from mcpx.server.gateway_tools import CALL_TOOL
from mcpx.server.offering import Offering
from mcpx.server.param_headers import check_headers
from mcpx.server.passthrough_routes import ToolRoute
from mcpx.server.promotion import TaskPromotion
from mcpx.server.resumable import ResumableCall
from mcpx.server.roots import Roots
from mcpx.server.sign_in_offers import SignInOffers, url_required_answer, without_upstream_urls
from mcpx.wire.errors import RpcError

#: Forwards one call upstream (or to the gateway): its connection, its context (with
#: its caller), its params and the route a C{tools/call} takes (C{None} for the rest).
Forward = Callable[
    [Conn, Context, dict[str, Any], "ToolRoute | None"], Awaitable[Mapping[str, Any]]
]

#: Spells a result built in the newest shape for C{method} and the request's revision.
Spell = Callable[[Mapping[str, Any], str, Context], Any]


async def strictly(caller: Caller, work: Awaitable[Mapping[str, Any]]) -> Mapping[str, Any]:
    """
    C{work}'s result for a strict caller (L{Caller.strict}): failing with the -32021 a
    question of its upstream was refused with, whatever the upstream answered after
    the refusal.
    """
    try:
        result = await work
    except Exception:
        if caller.refused is not None:
            raise caller.refused from None
        raise
    if caller.refused is not None:
        raise caller.refused
    return result


@frozen
class _Way:
    """One method through the pipeline, and what forwards its calls."""

    method: str
    forward: Forward


@frozen
class Calling:
    """The pipeline of one MCP server's calls that go upstream (see the module)."""

    _offering: Offering
    _asking: Asking
    _sign_ins: SignInOffers
    _roots: Roots
    _promotion: TaskPromotion | None
    _spell: Spell
    _clock: IReactorTime

    def method(self, method: str, forward: Forward) -> Method:
        """The server's method C{method}: its calls through the pipeline to C{forward}."""
        way = _Way(method, forward)

        async def calling(conn: Conn, context: Context, params: dict[str, Any]) -> Any:
            if context.modern:
                params = without_upstream_urls(params)
            try:
                route = None
                if method == "tools/call":
                    route = await self._route(conn, context, params)
                    if params.get("name") == CALL_TOOL:
                        return await self._sign_ins.offering(
                            conn,
                            context,
                            params,
                            lambda params: self._tasked(conn, context, params, route, way),
                        )
                    return await self._tasked(conn, context, params, route, way)
                return await self._inline(conn, context, params, None, way)
            except RpcError as error:
                answer = url_required_answer(error, context, method)
                if answer is None:
                    raise
                return answer

        calling.__name__ = getattr(forward, "__name__", method)
        return calling

    async def _route(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> ToolRoute | None:
        """
        The pass-through route of a C{tools/call}, found once; its C{Mcp-Param-*}
        headers checked against its arguments where the transport handed them over.
        """
        passthrough = self._offering.serving(conn)
        name = params.get("name")
        if passthrough is None or not isinstance(name, str):
            return None
        routes = passthrough.routes
        route = await routes.tool_route(context, name)
        headers = context.headers
        if headers is not None and route is not None:
            wanted = routes.param_headers(route, name)
            if wanted:
                check_headers(wanted, params.get("arguments"), headers)
        return route

    async def _tasked(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        route: ToolRoute | None,
        way: _Way,
    ) -> Any:
        """A C{tools/call}, as a task where its client and its tool want one, else inline."""
        promotion = self._promotion
        if promotion is None:
            return await self._inline(conn, context, params, route, way)
        if context.modern:
            if client_declares(context):
                return await self._extension(conn, context, params, route, way)
            if route is not None and promotion.required_by(conn, params, route):
                # Only the extension can carry a tool that runs as a task only.
                raise RpcError.missing_client_capability(TASKS_REQUIRED)
        elif "task" in params and context.task is None:
            # 2025-11-25 core tasks, honoured from any legacy client: {task} at once;
            # the task's call is this method again, without its task.
            with tracing.span("mcpx.task.promotion", {"mcpx.task.kind": "core"}):
                return await promotion.create_core(
                    conn,
                    context,
                    params,
                    lambda conn, context, params: self._inline(conn, context, params, route, way),
                    route,
                )
        return await self._inline(conn, context, params, route, way)

    def _inline(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        route: ToolRoute | None,
        way: _Way,
    ) -> Awaitable[Mapping[str, Any]]:
        """
        A call answered by its request: its caller built, the call forwarded and its
        questions asked.  A plain function: the common call, with no caller, costs no
        extra frame.
        """
        asking, method = self._asking, way.method
        if context.modern and "requestState" in params:
            return asking.resume(context, params, method)
        if method == "tools/call" and params.get("name") == CALL_TOOL:
            target = params.get("arguments")
            server = target.get("server") if type(target) is dict else None
            if type(server) is str:
                self._roots.uses(conn, (server,))
        caller = asking.caller(conn, context, params, method)
        if caller is None:
            return way.forward(conn, context, params, route)
        context = evolve(context, caller=caller)
        forwarded = self._forwarded(conn, context, params, route, way.forward)
        if caller.asker is None:
            return forwarded
        return asking.asked(forwarded, context, params, method)

    def _forwarded(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        route: ToolRoute | None,
        forward: Forward,
    ) -> Awaitable[Mapping[str, Any]]:
        """The call forwarded for its caller; strictly (L{strictly}) for a strict one."""
        caller = context.caller
        assert caller is not None
        forwarded = forward(conn, context, params, route)
        return strictly(caller, forwarded) if caller.strict else forwarded

    async def _extension(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        route: ToolRoute | None,
        way: _Way,
    ) -> Any:
        """
        A 2026-07-28 C{tools/call} from a client that declared the tasks extension
        (L{TaskPromotion.call_may_become_task}); its task's result is kept spelled as
        the request's revision has it.
        """

        promotion = self._promotion
        assert promotion is not None

        def spell(result: Mapping[str, Any]) -> Any:
            return self._spell(result, "tools/call", context)

        if not isinstance(params.get("name"), str):
            raise RpcError.invalid_params("params.name must be a string")
        if "requestState" in params:
            return await promotion.call_may_become_task(
                conn, context, params, route, spell, fresh=None
            )
        caller = self._asking.caller(conn, context, params, "tools/call", as_task=True)
        assert caller is not None
        context = evolve(context, caller=caller)
        asker = caller.asker
        call = (
            asker
            if isinstance(asker, ResumableCall)
            else ResumableCall(caller.id, "tools/call", self._clock)
        )
        forwarded = self._forwarded(conn, context, params, route, way.forward)
        return await promotion.call_may_become_task(
            conn, context, params, route, spell, fresh=(caller, call, forwarded)
        )
