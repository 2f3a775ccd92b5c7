# -*- test-case-name: tests.policy.test_guard -*-
"""
The pool as the entry points see it: every tool list and call through the policy.

L{GuardedPool} wraps the daemon's L{mcpx.pool.pool.Pool} and is what the C{/v1} ops,
the gateway surface and pass-through are given, so C{/mcp}, C{mcpx serve},
C{/v1/call}, C{mcpx call} and scripts all pass it.  For each call it

  1. refuses a tool C{tools.allow}/C{tools.deny} hides (it is not listed either);
  2. holds the arguments against the tool's C{inputSchema} (C{validate.input});
  3. asks the user through the question relay when C{tools.confirm} or
     C{confirmDestructive} says so, and answers a tool error when they decline;
  4. holds the result's C{structuredContent} against C{outputSchema}
     (C{validate.output}).

Schemas are compiled once per tool list the pool caches (L{mcpx.policy.schemas}), off
the reactor in the daemon (a schema of 20,000 nodes takes seconds to check against its
meta-schema); a call looks its tool up in an index built once per list, so the per-call
cost is a dictionary lookup and the fast acceptor.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Final, Unpack

from attrs import frozen
from twisted.logger import Logger

from mcpx import tracing
from mcpx.auth.caller import attributed_to, principal_of
from mcpx.call import Call
from mcpx.policy.errors import InvalidArguments, InvalidOutput, ToolHidden, problems_text
from mcpx.policy.schemas import HostileSchema, SchemaCheck, compile_schema
from mcpx.pool.interface import CallOptions
from mcpx.pool.requests import raising
from mcpx.pool.status import ReloadReport
from mcpx.settings.server_policy import DEFAULT_POLICY, Check, ServerPolicy
from mcpx.settings.servers import Scope, ServersConfig
from mcpx.wire.errors import RpcError

log = Logger()


@frozen
class Confirmation:
    """One call waiting for the user's yes: what it is, for whom, and which setting asks."""

    server: str
    client: str
    tool: str
    arguments: Mapping[str, Any]
    call: Call
    why: str

    def question(self) -> dict[str, Any]:
        """The form elicitation that asks the user."""
        return confirmation_question(self.server, self.tool, self.arguments, self.why)


#: Asks the user to confirm a call: whether they said yes.
Confirm = Callable[[Confirmation], Awaitable[bool]]
#: Runs a compilation of a tool's schemas (in a thread, in the daemon).
CompileIn = Callable[[Callable[[], "_ToolChecks"]], Awaitable["_ToolChecks"]]
Publish = Callable[..., None]

#: The most (server, client) tool indexes kept; past it they are built again.
_MAX_INDEXES: Final = 4096
#: What a call's input or output that does not fit its schema is refused with (enforce)
#: and warned of (warn).
_MISFITS: Final = {
    "input": (
        InvalidArguments,
        "the arguments of tool {tool!r} of server {server!r} do not fit its inputSchema: "
        "{text}; the call was not sent (validate.input is enforce)",
        "arguments that do not fit its inputSchema",
    ),
    "output": (
        InvalidOutput,
        "server {server!r} answered the call of tool {tool!r} with structuredContent that "
        "does not fit its outputSchema: {text}; the result was withheld (validate.output is "
        "enforce)",
        "results that do not fit its outputSchema",
    ),
}
_confirmations = itertools.count(1)


class _Later:
    """What L{GuardedPool._admit_now} answers when the call must wait to be decided."""

    __slots__ = ()


_LATER: Final = _Later()


def _no_events(kind: str, server: str | None = None, **data: Any) -> None:
    return None


class _ToolChecks:
    """A tool's compiled schemas (C{None}: none given), or why one was refused."""

    __slots__ = ("input", "input_refused", "output", "output_refused")

    def __init__(self, tool: Mapping[str, Any]) -> None:
        self.input, self.input_refused = _compiled(tool.get("inputSchema"))
        self.output, self.output_refused = _compiled(tool.get("outputSchema"))


def _compiled(schema: object) -> tuple[SchemaCheck | None, str | None]:
    if schema is None:
        return None, None
    try:
        return compile_schema(schema), None
    except HostileSchema as e:
        return None, str(e)


class _Index:
    """One tool list the pool cached: its tools by name, their schemas compiled on demand."""

    __slots__ = ("checks", "first", "size", "tools")

    def __init__(self, listed: list[dict[str, Any]]) -> None:
        self.first = listed[0] if listed else None
        self.size = len(listed)
        self.tools = {t.get("name"): t for t in listed if isinstance(t, dict)}
        self.checks: dict[str, _ToolChecks] = {}

    def same_list(self, listed: list[dict[str, Any]]) -> bool:
        # The pool hands out copies of its cached list holding the same tool objects;
        # a new list from the server holds new ones.
        first = listed[0] if listed else None
        return first is self.first and len(listed) == self.size

    async def checks_of(self, name: str, compile_in: CompileIn) -> _ToolChecks | None:
        found = self.checks.get(name)
        if found is None:
            tool = self.tools.get(name)
            if tool is None:
                return None
            found = self.checks[name] = await compile_in(lambda: _ToolChecks(tool))
        return found


async def _compile_here(compile: Callable[[], _ToolChecks]) -> _ToolChecks:
    return compile()


def _output_checks(policy: ServerPolicy, checks: _ToolChecks | None) -> _ToolChecks | None:
    """C{checks}, when a call's result is held against its tool's C{outputSchema}; else C{None}."""
    if (
        checks is not None
        and policy.validate_output is not Check.OFF
        and (checks.output is not None or checks.output_refused is not None)
    ):
        return checks
    return None


def declined_result(server: str, tool: str, why: str) -> dict[str, Any]:
    """The tool error a caller gets when a confirmation was declined or not answered."""
    text = (
        f"mcpx did not call tool {tool!r} of server {server!r}: it needs confirmation ({why}) "
        "and the user declined or did not answer in time; the server never saw the call"
    )
    return {"content": [{"type": "text", "text": text}], "isError": True}


class GuardedPool:
    """
    The pool with the policy in front of it; everything else is the pool's own.

    @ivar counts: how many calls each check flagged, by C{(check, server)}: C{input},
        C{output} (invalid, whatever the mode), C{denied}, C{confirmed}, C{declined}.
    """

    def __init__(
        self,
        inner: Any,
        *,
        confirm: Confirm | None = None,
        publish: Publish = _no_events,
        compile_in: CompileIn = _compile_here,
    ) -> None:
        """
        @param inner: the pool (L{mcpx.pool.pool.Pool}, or a fake with its calls).
        @param confirm: asks the user; without it, a call that needs confirmation is
            declined.
        @param compile_in: runs the compilation of a tool's schemas; the daemon gives
            its reactor's thread pool, so that a huge schema does not hold the reactor.
        """
        self._inner = inner
        self._compile_in = compile_in
        self._confirm = confirm
        self._publish = publish
        self._indexes: dict[tuple[str, str], _Index] = {}
        #: The list L{_admit_now} was handed last (the pool's own cached list, whose
        #: identity tells it), and its index: one, so one list is kept alive at most.
        self._last_index: tuple[list[dict[str, Any]] | None, _Index | None] = (None, None)
        self._warned: set[tuple[str, str, str]] = set()
        self.counts: Counter[tuple[str, str]] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def inner(self) -> Any:
        return self._inner

    def policy(self, server: str) -> ServerPolicy:
        """C{server}'s policy under the configuration the pool runs now."""
        servers = getattr(self._inner, "servers", None)
        if isinstance(servers, ServersConfig):
            return servers.policy(server)
        return DEFAULT_POLICY

    # Lists

    async def tools(self, server: str, *, client: str = "") -> list[dict[str, Any]]:
        """The server's tools that its policy does not hide."""
        listed: list[dict[str, Any]] = await self._inner.tools(server, client=client)
        return self._visible(server, listed)

    def cached_catalogue(
        self, server: str, kind: str, *, client: str = ""
    ) -> list[dict[str, Any]] | None:
        """
        The pool's L{mcpx.pool.pool.Pool.cached_catalogue}, its tools as L{tools} hands
        them out (without those the policy hides).
        """
        listed: list[dict[str, Any]] | None = self._inner.cached_catalogue(
            server, kind, client=client
        )
        if listed is None or kind != "tools":
            return listed
        return self._visible(server, listed)

    def _visible(self, server: str, listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tools of C{listed} that C{server}'s policy does not hide."""
        policy = self.policy(server)
        if not policy.hides_any:
            return listed
        return [
            tool
            for tool in listed
            if not isinstance(name := tool.get("name"), str) or policy.hidden_by(name) is None
        ]

    def _lister(self, server: str, client: str) -> str:
        """
        Whose list of C{server}'s tools C{client} gets: its own for a C{client}-scoped
        server, everybody's (C{""}) for a shared one, so a shared server's schemas are
        compiled once for every client and not once per 2026-07-28 request (each of which
        is a client of its own).
        """
        servers = getattr(self._inner, "servers", None)
        if isinstance(servers, ServersConfig):
            config = servers.servers.get(server)
            if config is not None and config.scope is not Scope.CLIENT:
                return ""
        return client

    async def _index(self, server: str, client: str) -> _Index | None:
        # Taken at once when the pool has the list cached: a call awaits nothing here.
        listed: list[dict[str, Any]] | None = self._inner.cached_catalogue(
            server, "tools", client=client
        )
        if listed is None:
            try:
                listed = await self._inner.tools(server, client=client)
            except RpcError as e:
                # Listing failed but the call may not: it goes on unchecked (the pool's
                # own failures, which the call would meet too, are left to say so).
                self._warn_once(server, "", "list", f"its tools could not be listed ({e})")
                return None
        return self._index_of(server, client, listed)

    def _index_of(self, server: str, client: str, listed: list[dict[str, Any]]) -> _Index:
        """The index of C{listed}, C{server}'s tools as C{client} has them."""
        key = (server, self._lister(server, client))
        index = self._indexes.get(key)
        if index is None or not index.same_list(listed):
            if len(self._indexes) >= _MAX_INDEXES:
                self._indexes.clear()
            index = self._indexes[key] = _Index(listed)
        return index

    # Calls

    def call_tool(
        self, server: str, tool: str, arguments: Mapping[str, Any], **options: Unpack[CallOptions]
    ) -> Coroutine[Any, Any, dict[str, Any]]:
        """
        Call a tool, as L{mcpx.pool.pool.Pool.call_tool}, through the policy.  The
        options go on to the pool as they came; the policy reads only whose call it is.

        Decided at once when nothing need be waited for (the list cached, its schemas
        compiled, nobody to ask) and untraced: the coroutine handed back is then the
        pool's own, or one that holds the result against the tool's C{outputSchema};
        none of the policy's around the call otherwise.

        @raise ToolHidden: when C{tools.allow}/C{tools.deny} hide it.
        @raise InvalidArguments: for arguments that break its C{inputSchema} (enforce).
        @raise InvalidOutput: for C{structuredContent} that breaks its C{outputSchema}
            (enforce).
        @return: the result, or a tool error when a needed confirmation was declined,
            when awaited.
        """
        if tracing.ON:
            return self._call_tool_later(server, tool, arguments, options)
        try:
            policy = self.policy(server)
            admitted = self._admit_now(policy, server, tool, arguments, options.get("client", ""))
        except Exception as e:
            return raising(e)
        if isinstance(admitted, _Later):
            return self._call_tool_later(server, tool, arguments, options)
        calling: Coroutine[Any, Any, dict[str, Any]] = self._inner.call_tool(
            server, tool, arguments, **options
        )
        output = _output_checks(policy, admitted)
        if output is None:
            return calling
        return self._output_checked(
            calling, policy, server, tool, output, client=options.get("client", "")
        )

    async def _call_tool_later(
        self, server: str, tool: str, arguments: Mapping[str, Any], options: CallOptions
    ) -> dict[str, Any]:
        """L{call_tool}, decided by L{_admit} (it waits for something, or is traced)."""
        policy = self.policy(server)
        client = options.get("client", "")
        call = options.get("call")
        # A span of its own where traced (tracing.span does nothing otherwise).
        with tracing.span("mcpx.policy", {"mcpx.server": server, "gen_ai.tool.name": tool}) as span:
            checks, declined = await self._admit(
                policy, server, tool, arguments, client=client, call=call
            )
            tracing.ended(span, "mcpx.outcome", "ok" if declined is None else "declined")
        if declined is not None:
            return declined
        calling: Coroutine[Any, Any, dict[str, Any]] = self._inner.call_tool(
            server, tool, arguments, **options
        )
        output = _output_checks(policy, checks)
        if output is None:
            return await calling
        return await self._output_checked(calling, policy, server, tool, output, client=client)

    async def _output_checked(
        self,
        calling: Awaitable[dict[str, Any]],
        policy: ServerPolicy,
        server: str,
        tool: str,
        checks: _ToolChecks,
        *,
        client: str,
    ) -> dict[str, Any]:
        """The result of C{calling}, held against the tool's C{outputSchema}."""
        result = await calling
        if isinstance(result, dict) and result.get("isError") is not True:
            self._check_output(server, tool, policy.validate_output, checks, result, client=client)
        return result

    def _admit_now(
        self,
        policy: ServerPolicy,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        client: str,
    ) -> _ToolChecks | _Later | None:
        """
        L{_admit}, when it has nothing to wait for: the tool's checks, the arguments
        held against them; or L{_LATER} when the list is not cached, the tool's schemas
        are not compiled yet or the call needs confirmation (then L{_admit} decides).

        @raise ToolHidden: when C{tools.allow}/C{tools.deny} hide it.
        @raise InvalidArguments: for arguments that break its C{inputSchema} (enforce).
        """
        if policy.hides_any:
            self._refuse_hidden(policy, server, tool)
        listed: list[dict[str, Any]] | None = self._inner.cached_catalogue(
            server, "tools", client=client
        )
        if listed is None:
            return _LATER
        last, index = self._last_index
        if last is not listed or index is None:
            index = self._index_of(server, client, listed)
            self._last_index = (listed, index)
        definition = index.tools.get(tool)
        checks = index.checks.get(tool)
        if checks is None and definition is not None:
            # Compiled by L{_admit} into the index it finds (L{_index_of}), which the next
            # call looks up again: this one may no longer be kept there.
            self._last_index = (None, None)
            return _LATER
        if (
            policy.confirms_any
            and policy.confirmation_for(
                tool, definition.get("annotations") if definition is not None else None
            )
            is not None
        ):
            return _LATER
        if checks is not None and policy.validate_input is not Check.OFF:
            self._check_input(server, tool, policy.validate_input, checks, arguments, client=client)
        return checks

    def _refuse_hidden(self, policy: ServerPolicy, server: str, tool: str) -> None:
        """
        @raise ToolHidden: when C{tools.allow}/C{tools.deny} hide C{tool}.
        """
        hidden = policy.hidden_by(tool)
        if hidden is not None:
            self.counts["denied", server] += 1
            raise ToolHidden(
                f"tool {tool!r} of server {server!r} is hidden by its {hidden} "
                "in the mcpx configuration; it cannot be listed or called",
                {"server": server, "tool": tool, "setting": hidden.split(" ", 1)[0]},
            )

    async def _admit(
        self,
        policy: ServerPolicy,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        client: str,
        call: Call | None,
    ) -> tuple[_ToolChecks | None, dict[str, Any] | None]:
        """
        What the policy says of one call before it goes on (L{call_tool}): the tool's
        checks, and the tool error to answer instead where a confirmation was declined.

        @raise ToolHidden: when C{tools.allow}/C{tools.deny} hide it.
        @raise InvalidArguments: for arguments that break its C{inputSchema} (enforce).
        """
        self._refuse_hidden(policy, server, tool)
        index = await self._index(server, client)
        definition = index.tools.get(tool) if index is not None else None
        checks = await index.checks_of(tool, self._compile_in) if index is not None else None
        if checks is not None and policy.validate_input is not Check.OFF:
            self._check_input(server, tool, policy.validate_input, checks, arguments, client=client)
        why = policy.confirmation_for(
            tool, definition.get("annotations") if definition is not None else None
        )
        if why is not None and not await self._confirmed(
            server,
            client=client,
            tool=tool,
            arguments=arguments,
            call=call,
            why=why,
        ):
            return checks, declined_result(server, tool, why)
        return checks, None

    def _check_input(
        self,
        server: str,
        tool: str,
        mode: Check,
        checks: _ToolChecks,
        arguments: Mapping[str, Any],
        *,
        client: str,
    ) -> None:
        if checks.input is not None:
            problems = checks.input.problems(arguments)
        elif checks.input_refused is not None:
            problems = [
                {"path": "", "reason": f"its inputSchema was refused: {checks.input_refused}"}
            ]
        else:
            return
        if problems:
            self._misfit("input", server, tool, problems, mode=mode, client=client)

    def _check_output(
        self,
        server: str,
        tool: str,
        mode: Check,
        checks: _ToolChecks,
        result: Mapping[str, Any],
        *,
        client: str,
    ) -> None:
        if "structuredContent" not in result:
            problems = [{"path": "", "reason": "the result has no structuredContent"}]
        elif checks.output is not None:
            problems = checks.output.problems(result["structuredContent"])
        else:
            why = checks.output_refused
            problems = [{"path": "", "reason": f"its outputSchema was refused: {why}"}]
        if problems:
            self._misfit("output", server, tool, problems, mode=mode, client=client)

    def _misfit(
        self,
        what: str,
        server: str,
        tool: str,
        problems: list[dict[str, str]],
        *,
        mode: Check,
        client: str,
    ) -> None:
        """
        A call's C{what} (L{_MISFITS}) does not fit its schema: count and publish it
        (its events are the caller's subject's to see, mcpx.ops.events, and the
        owner's), then refuse it (enforce) or warn of it once (warn).
        """
        self.counts[what, server] += 1
        principal = principal_of(client)
        text = problems_text(problems)
        self._publish(
            f"policy.{what}_invalid",
            server,
            **attributed_to(principal),
            tool=tool,
            problems=problems,
            mode=mode.value,
        )
        error, refusal, warning = _MISFITS[what]
        if mode is Check.ENFORCE:
            message = refusal.format(tool=tool, server=server, text=text)
            raise error(message, {"server": server, "tool": tool, "errors": problems})
        self._warn_once(server, tool, what, f"{warning}: {text}")

    def _warn_once(self, server: str, tool: str, what: str, message: str) -> None:
        key = (server, tool, what)
        if key in self._warned:
            return
        if len(self._warned) > _MAX_INDEXES:
            self._warned.clear()
        self._warned.add(key)
        named = f"tool {tool!r} of server {server!r}" if tool else f"server {server!r}"
        log.warn(
            "policy: {named} had {message} (passed on; logged once per tool)",
            named=named,
            message=message,
        )

    async def _confirmed(
        self,
        server: str,
        *,
        client: str,
        tool: str,
        arguments: Mapping[str, Any],
        call: Call | None,
        why: str,
    ) -> bool:
        principal = principal_of(client)
        if call is None:
            # Nobody to ask natively: the question waits in the broker (mcpx elicit).
            # It is the caller's subject's question, as a /v1 call's would be.
            call = Call(f"confirm-{next(_confirmations)}", {}, None, owner=principal or None)
        self._publish(
            "policy.confirm_asked", server, **attributed_to(principal), tool=tool, reason=why
        )
        yes = False
        if self._confirm is not None:
            # A question to a person, as the server's are (mcpx.questions.relay).
            with tracing.span(
                "mcpx.question confirmation", {"mcpx.server": server, "gen_ai.tool.name": tool}
            ) as span:
                yes = await self._confirm(Confirmation(server, client, tool, arguments, call, why))
                tracing.ended(span, "mcpx.question.action", "accept" if yes else "decline")
        self.counts["confirmed" if yes else "declined", server] += 1
        self._publish(
            "policy.confirm_answered", server, **attributed_to(principal), tool=tool, confirmed=yes
        )
        return yes

    # Reloads

    async def reload(self, servers: ServersConfig) -> ReloadReport:
        """
        The pool's reload; servers whose policy alone changed are named in the
        report's C{policy_changed}, so hosts are told their lists changed.
        """
        old = getattr(self._inner, "servers", None)
        report: ReloadReport = await self._inner.reload(servers)
        if not isinstance(old, ServersConfig):
            return report
        moved = set(report.removed) | set(report.added) | set(report.changed)
        retuned = tuple(
            name
            for name in servers
            if name in old and name not in moved and old.policy(name) != servers.policy(name)
        )
        if not retuned:
            return report
        return ReloadReport(
            report.removed, report.added, report.changed, report.unchanged, policy_changed=retuned
        )


def confirmation_question(
    server: str, tool: str, arguments: Mapping[str, Any], why: str
) -> dict[str, Any]:
    """The form elicitation that asks the user to confirm one call."""
    shown = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    if len(shown) > 2000:
        shown = shown[:2000] + "…"
    return {
        "mode": "form",
        "message": (
            f"mcpx asks before calling tool {tool!r} of server {server!r} ({why}), "
            f"with arguments {shown}. Run it?"
        ),
        "requestedSchema": {
            "type": "object",
            "properties": {
                "confirm": {"type": "boolean", "title": f"Run {tool} on {server}"},
            },
            "required": ["confirm"],
        },
    }


def said_yes(answer: object) -> bool:
    """Whether an elicitation's answer accepted with C{confirm: true}."""
    if not isinstance(answer, Mapping) or answer.get("action") != "accept":
        return False
    content = answer.get("content")
    return isinstance(content, Mapping) and content.get("confirm") is True
