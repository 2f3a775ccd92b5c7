# -*- test-case-name: tests.server.test_ext_tasks -*-
"""
Where a C{tools/call} becomes a task, and the C{tasks/*} methods of either era.

A legacy client's call with C{params.task} is a 2025-11-25 core task at once
(L{mcpx.server.tasks}).  A 2026-07-28 client that declares the tasks extension has its
call answered inline if it finishes or asks soon enough, and made a task otherwise
(L{mcpx.server.ext_tasks}).  Either is possible only where the daemon keeps tasks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from attrs import define, field
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime

from mcpx import tracing
from mcpx.call import Call
from mcpx.server.asking import Asking, task_error
from mcpx.server.conn import Conn, Context, Method
from mcpx.server.ext_tasks import REQUIRED as TASKS_REQUIRED
from mcpx.server.ext_tasks import (
    ExtensionTasks,
    becomes_task_after,
    client_declares,
    race,
    task_owner,
)
from mcpx.server.gateway_tools import CALL_TOOL, EXEC_TOOL
from mcpx.server.offering import Offering
from mcpx.server.passthrough_routes import ToolRoute
from mcpx.server.resumable import ResumableCall, waiting
from mcpx.server.tasks import CoreTasks
from mcpx.tasks.store import TooManyTasks, TooManyTasksForClient
from mcpx.wire.errors import RpcError

#: Spells a C{tools/call} result for the request's revision.
_Spell = Callable[[Mapping[str, Any]], Any]


@define(eq=False, slots=False)
class TaskPromotion:
    """The calls of one MCP server that may become tasks, and its C{tasks/*} methods."""

    core: CoreTasks
    extension: ExtensionTasks
    _asking: Asking
    _offering: Offering
    _clock: IReactorTime
    _task_after: float = field(kw_only=True)

    def methods(self) -> dict[str, Method]:
        """The C{tasks/*} methods, by name."""
        core, extension = self.core, self.extension
        return {
            "tasks/get": self._by_era("tasks/get", core.get, extension.get),
            "tasks/result": core.result,
            "tasks/list": core.list_tasks,
            "tasks/cancel": self._by_era("tasks/cancel", core.cancel, extension.cancel),
            "tasks/update": self._by_era("tasks/update", None, extension.update),
        }

    def _by_era(
        self,
        method: str,
        legacy: Method | None,
        modern: Callable[[str, dict[str, Any]], Awaitable[Mapping[str, Any]]],
    ) -> Method:
        """
        A C{tasks/*} method: core tasks' C{legacy} for a legacy client (C{-32601} where
        there is none), the extension's C{modern} for a 2026-07-28 one.
        """

        def by_era(
            conn: Conn, context: Context, params: dict[str, Any]
        ) -> Awaitable[Mapping[str, Any]]:
            if context.modern:
                if not client_declares(context):
                    raise RpcError.missing_client_capability(TASKS_REQUIRED)
                return modern(task_owner(context, conn.identity), params)
            if legacy is None:
                raise RpcError.method_not_found(method)
            return legacy(conn, context, params)

        return by_era

    def create_core(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        answer: Method,
        route: ToolRoute | None,
    ) -> Awaitable[dict[str, Any]]:
        """
        A legacy C{tools/call} with C{params.task}: its core task, at once.

        @param route: the call's pass-through route (L{mcpx.server.calling}).
        """
        support = self.task_support(conn, params, route)
        return self.core.create(conn, context, params, answer, support)

    async def call_may_become_task(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        route: ToolRoute | None,
        spell: _Spell,
        *,
        fresh: tuple[Call, ResumableCall, Awaitable[Mapping[str, Any]]] | None,
    ) -> Mapping[str, Any]:
        """
        A 2026-07-28 C{tools/call} from a client that declared the tasks extension: the
        call's own answer if it finishes or asks its client something soon enough, a
        C{CreateTaskResult} once it has run longer, or as soon as the upstream made it
        a task of its own (see L{mcpx.server.ext_tasks}).  A retry that answers the
        call's questions (C{requestState}) may become a task the same way.

        @param route: the call's pass-through route (L{mcpx.server.calling}).
        @param spell: spells the call's result as the request's revision does.
        @param fresh: a first request's L{Call}, the resumable call it runs in and its
            work, not started yet; C{None} for a retry.
        """
        asking = self._asking
        support, server, tool = self.task_support(conn, params, route)
        after = becomes_task_after(support, self._task_after)
        rounds = 0
        if fresh is None:
            state = asking.verified(context, params, "tools/call")
            if asking.held_elsewhere(state):
                # Held by another daemon: it answers, whatever its call comes to.
                return await asking.relay(state, params)
            call, rounds = await asking.resumed(context, params, state)
            deciding, _ = race(call, after, self._clock)
        else:
            fresh_call, call, work = fresh
            deciding, fresh_call.on_upstream_task = race(call, after, self._clock)
            call.run(Deferred.fromCoroutine(_awaited(work)))
        try:
            became_task = await deciding
        except CancelledError:
            # The request went before the call was anything but the request's.
            if not call.call.is_task:
                call.cancel()
            raise
        if not became_task:
            return await asking.round(call, context, params, rounds)
        try:
            with tracing.span("mcpx.task.promotion", {"mcpx.task.kind": "extension"}):
                created = self.extension.adopt(
                    task_owner(context, conn.identity),
                    call,
                    server=server,
                    tool=tool or params["name"],
                    spell=spell,
                    describe_error=lambda failure: task_error(failure, call),
                )
        except (TooManyTasksForClient, TooManyTasks):
            # No room for a task: the call is answered inline, however long it takes.
            await waiting(call, call.cancel)
            return await asking.round(call, context, params, rounds)
        call.call.became_task()
        return created

    def task_support(
        self, conn: Conn, params: dict[str, Any], route: ToolRoute | None
    ) -> tuple[str | None, str | None, str | None]:
        """
        The C{execution.taskSupport} of the tool a C{tools/call} names, as this client
        sees it (a pass-through tool's own, C{"optional"} for C{mcpx_call}, nothing for
        the rest), and the server and tool it calls upstream.

        @param route: the call's pass-through route (L{mcpx.server.calling}), C{None}
            for a gateway tool.
        """
        name = params.get("name")
        passthrough = self._offering.serving(conn)
        if passthrough is not None and route is not None and isinstance(name, str):
            # The tool as the client's tools/list offers it, found with the call's
            # owner: no list is built for a call.
            return route.task_support, route.server, route.upstream
        if name == EXEC_TOOL:
            return "optional", None, None
        if name == CALL_TOOL:
            arguments = params.get("arguments")
            called = arguments if type(arguments) is dict else {}
            upstream, called_tool = called.get("server"), called.get("tool")
            return (
                "optional",
                upstream if isinstance(upstream, str) else None,
                called_tool if isinstance(called_tool, str) else None,
            )
        return None, None, None

    def visible(
        self, conn: Conn, context: Context, task_ids: Sequence[str]
    ) -> list[tuple[str, dict[str, Any]]]:
        """The extension tasks of C{task_ids} the caller may see, and their states."""
        if not task_ids:
            return []
        owner = task_owner(context, conn.identity)
        found = []
        for task_id in task_ids:
            task = self.extension.visible(owner, task_id)
            if task is not None:
                found.append((task_id, self.extension.detailed(task)))
        return found


async def _awaited(work: Awaitable[Mapping[str, Any]]) -> Mapping[str, Any]:
    return await work
