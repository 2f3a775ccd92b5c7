# -*- test-case-name: tests.upstream.test_session -*-
"""
Who answers an upstream server's questions, and who hears its notifications.

The pool gives each session it opens the L{UpstreamHandlers} the daemon builds for
that server and scope: a C{relay} from the question machinery
(L{mcpx.questions.relay.Relay.handlers}, behind the sampling guard of
L{mcpx.policy.sampling}) when the daemon has a relay, and always a C{notification}
sink that hands resource updates and list changes on to the MCP server.

A server's question arrives two ways — a legacy server sends a JSON-RPC request
(C{elicitation/create}, C{sampling/createMessage}, C{roots/list}); a 2026-07-28
server answers C{input_required} with the same three as input requests — and both
are resolved by L{UpstreamHandlers.answer}, so the two eras can never answer the
same question differently.

mcpx declares to a server only the client capabilities it has a handler for: a
declaration nobody can honour would be a promise broken in silence.

In pass-through, where a server sees the host through mcpx, it is declared no more
than that host declared (issue 43, item 8): a server that offers a tool only to a
client that can be asked (server-everything hides its elicitation, sampling and roots
tools from one that cannot) offers the host the same tools as directly.  The host's
questions are named in the pool's client identity (L{declaring}), so its requests go to
an instance of their own for that set, whose handlers declare only it
(L{UpstreamHandlers.declares}, read back from the instance's scope key by
L{declared_in}).  A host that declares every question mcpx relays shares the instance
that declares them all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from attrs import define, field

from mcpx.call import Call
from mcpx.spec.matrix import capability_in
from mcpx.spec.questions import ELICIT, LIST_ROOTS, SAMPLE
from mcpx.spec.revision import Revision
from mcpx.wire.errors import RpcError
from mcpx.wire.jsontext import loads
from mcpx.wire.messages import encode_json, is_mapping

Question = Callable[[Mapping[str, Any]], Awaitable[Mapping[str, Any]]]
#: Answers any of the three questions knowing the call it came with (the call the
#: request was made for, when the server asked inside its result; C{None}: a request
#: made for nobody, or a question that arrived on the connection) and its
#: C{inputRequests} key.
AnyQuestion = Callable[
    [str, Mapping[str, Any], "Call | None", "str | None"], Awaitable[Mapping[str, Any]]
]
NotificationSink = Callable[[str, Mapping[str, Any] | None], None]
#: Told of each notification an upstream server sends: (server, method, params).
UpstreamListener = Callable[[str, str, Mapping[str, Any] | None], None]

#: The questions a host may declare, as the names L{declaring} gives them.
QUESTIONS: Final = frozenset({"elicitation.form", "elicitation.url", "sampling", "roots"})

#: Between a client identity (or scope key) and the questions it declares: a control
#: character no identity holds.
_DECLARES: Final = "\x1edeclares:"


def questions_declared(capabilities: Mapping[str, Any]) -> frozenset[str]:
    """
    The questions of L{QUESTIONS} a client's C{capabilities} declare: an empty
    C{elicitation} object is the form mode of the revisions before modes.
    """
    found: set[str] = set()
    elicitation = capabilities.get("elicitation")
    if is_mapping(elicitation):
        if "form" in elicitation or not elicitation:
            found.add("elicitation.form")
        if "url" in elicitation:
            found.add("elicitation.url")
    for name in ("sampling", "roots"):
        if is_mapping(capabilities.get(name)):
            found.add(name)
    return frozenset(found)


def declaring(client: str, questions: frozenset[str]) -> str:
    """
    C{client}'s identity for the pool when what mcpx declares upstream is to be no more
    than C{questions} (L{questions_declared}): as it is when they are every question
    mcpx relays, else marked with them, so the pool keys an instance of its own.
    """
    if questions >= QUESTIONS:
        return client
    return f"{client}{_DECLARES}{','.join(sorted(questions & QUESTIONS))}"


def declared_in(key: str) -> tuple[str, frozenset[str] | None]:
    """
    A client identity or scope key without the mark of L{declaring}, and the questions
    it marks (C{None}: unmarked, every one).
    """
    base, mark, listed = key.partition(_DECLARES)
    if not mark:
        return key, None
    return base, frozenset(name for name in listed.split(",") if name)


def mark_of(key: str) -> str:
    """The mark L{declaring} put on C{key}, or C{""}: to put on a key made from it."""
    index = key.find(_DECLARES)
    return "" if index < 0 else key[index:]


@define
class UpstreamHandlers:
    """
    The answers a session can give, by kind of question.

    @ivar elicitation: answers C{elicitation/create} (form or url mode, as declared).
    @ivar elicitation_modes: the modes C{elicitation} can answer, C{"form"} and/or C{"url"}.
    @ivar sampling: answers C{sampling/createMessage}.
    @ivar sampling_tools: whether C{sampling} can run tool use (C{sampling.tools}).
    @ivar roots: answers C{roots/list}.
    @ivar relay: answers all three kinds of question, told the call and key; when set,
        it is what answers, and mcpx declares every kind (form and url elicitation).
    @ivar notification: hears every notification the server sends.
    @ivar declares: the questions mcpx may declare for them at most (L{QUESTIONS}, as
        L{declaring} named them), or C{None} for every one it can answer: the questions
        of the host an instance serves in pass-through.
    """

    elicitation: Question | None = None
    elicitation_modes: frozenset[str] = frozenset({"form"})
    sampling: Question | None = None
    sampling_tools: bool = False
    roots: Question | None = None
    relay: AnyQuestion | None = None
    notification: NotificationSink | None = None
    declares: frozenset[str] | None = None
    _by_method: dict[str, Question | None] = field(init=False)
    _declared: dict[tuple[Any, ...], tuple[bytes, dict[str, Any]]] = field(
        init=False, factory=dict, eq=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        if self.relay is not None:
            self.elicitation_modes = frozenset({"form", "url"})
        self._by_method = {
            ELICIT: self.elicitation,
            SAMPLE: self.sampling,
            LIST_ROOTS: self.roots,
        }

    def client_capabilities(self, revision: Revision) -> dict[str, Any]:
        """
        The capabilities to declare at C{revision}: one per handler, spelled for it.

        Every 2026-07-28 request declares them, so they are worked out once per revision
        and set of handlers, and kept as their JSON text: each caller gets a copy of its
        own to change, read in one pass in C (a walk of the objects took four times as long).
        """
        copied: dict[str, Any] = loads(self._declared_at(revision)[0])
        return copied

    def kept_capabilities(self, revision: Revision) -> dict[str, Any]:
        """
        L{client_capabilities} as one object kept with their text, the same one for every
        caller while the revision and the handlers are the same: never to be changed.
        What a 2026-07-28 request of mcpx's own declares as it is, and whose text is
        written once (L{mcpx.upstream.modern_session}).
        """
        return self._declared_at(revision)[1]

    def _declared_at(self, revision: Revision) -> tuple[bytes, dict[str, Any]]:
        """The capabilities to declare at C{revision} now: their text, and that text read."""
        key = (
            revision,
            self.relay is not None,
            self.roots is not None,
            self.sampling is not None,
            self.sampling_tools,
            self.elicitation is not None,
            self.elicitation_modes,
            self.declares,
        )
        declared = self._declared.get(key)
        if declared is None:
            text = encode_json(self._capabilities_at(revision))
            declared = self._declared[key] = (text, loads(text))
        return declared

    def _capabilities_at(self, revision: Revision) -> dict[str, Any]:
        declared: dict[str, Any] = {}
        relayed = self.relay is not None
        allowed = QUESTIONS if self.declares is None else self.declares
        modes = frozenset(
            mode for mode in self.elicitation_modes if f"elicitation.{mode}" in allowed
        )
        if (
            (relayed or self.roots is not None)
            and "roots" in allowed
            and capability_in("client", "roots", revision)
        ):
            declared["roots"] = {}
            if relayed and capability_in("client", "roots.listChanged", revision):
                # The relay passes on its hosts' notifications/roots/list_changed.
                declared["roots"]["listChanged"] = True
        if (
            (relayed or self.sampling is not None)
            and "sampling" in allowed
            and capability_in("client", "sampling", revision)
        ):
            sampling: dict[str, Any] = {}
            if self.sampling_tools and capability_in("client", "sampling.tools", revision):
                sampling["tools"] = {}
            declared["sampling"] = sampling
        if (
            (relayed or self.elicitation is not None)
            and modes
            and capability_in("client", "elicitation", revision)
        ):
            if capability_in("client", "elicitation.form", revision):
                declared["elicitation"] = {mode: {} for mode in sorted(modes)}
            elif "form" in modes:
                declared["elicitation"] = {}
        return declared

    def can_answer(self, method: str) -> bool:
        if method not in self._by_method:
            return False
        return self.relay is not None or self._by_method[method] is not None

    async def answer(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        call: Call | None = None,
        key: str | None = None,
    ) -> Mapping[str, Any]:
        """
        Resolve one question, whichever era asked it.

        @param call: the call the question came with, when the server asked inside the
            result of a request made for it (C{None}: it arrived on the connection).
        @param key: its name in the round's C{inputRequests}, when it was one.
        @raise RpcError: -32601 when nothing here answers C{method} (it was never declared).
        """
        if not self.can_answer(method):
            raise RpcError.method_not_found(method)
        if method == ELICIT:
            mode = params.get("mode", "form")
            if mode not in self.elicitation_modes:
                raise RpcError.invalid_params(f"elicitation mode {mode!r} was not declared")
        if self.relay is not None:
            return await self.relay(method, params, call, key)
        handler = self._by_method[method]
        assert handler is not None
        return await handler(params)

    def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        if self.notification is not None:
            self.notification(method, params)


NO_HANDLERS = UpstreamHandlers()
