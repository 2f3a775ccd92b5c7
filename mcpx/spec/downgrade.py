# -*- test-case-name: tests.spec.test_downgrade -*-
"""
Spelling a result for the revision the peer speaks.

mcpx builds every result once, in the newest shape: 2026-07-28, plus the few
things older revisions had that it dropped (C{Tool.execution}, the core
C{tasks} capability, C{InitializeResult}).  At the edge, L{downgrade} turns
such a result into what a peer on an older revision may receive, and
L{envelope} adds what 2026-07-28 asks of every result.

Both run on every answer mcpx sends, so:

  - which fields a revision lacks is read from the revision matrix once, at
    import, into one L{Spelling} per revision;
  - whether a method's result can carry any of them is decided once per
    (revision, method).  When it cannot, L{downgrade} hands back its argument
    and costs two dictionary lookups;
  - otherwise the result is copied along the paths that change and nowhere
    else.  Objects nothing was taken from are shared with the original, which
    is never edited: a stored result (a task's, a cached list) is handed out
    many times, to peers on different revisions.

Nothing a revision lacks silently vanishes when it carries information:
structured content is also given as text, and audio and resource-link blocks
become text blocks that say what was there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Final

from mcpx.spec.meta_keys import SERVER_INFO_KEY
from mcpx.spec.question_spelling import question
from mcpx.spec.revision import Revision
from mcpx.spec.spelling import SPELLINGS, Spelling
from mcpx.spec.stand_ins import audio_text, carries_as_json, link_text, repeats_payloads

#: Imported from here by the rest of mcpx too.
__all__ = ["CACHE_SCOPES", "SERVER_INFO_KEY", "downgrade", "envelope", "question"]

#: C{cacheScope} per method whose 2026-07-28 result is a C{CacheableResult}.
#: Lists that follow configuration are C{public}; what depends on the caller
#: (its session's own resources, the content it reads) is C{private}.
CACHE_SCOPES: Final[Mapping[str, str]] = {
    "server/discover": "public",
    "tools/list": "public",
    "prompts/list": "public",
    "resources/templates/list": "public",
    "resources/list": "private",
    "resources/read": "private",
}

#: C{resultType} values that are not C{"complete"} and that L{envelope} keeps:
#: a multi-round-trip question, and a task (the tasks extension).
_INTERIM_RESULT_TYPES: Final = frozenset({"input_required", "task"})


# -- copy-on-write helpers ---------------------------------------------------------

#: Stands for a capability that is to be left out.
_MISSING: Final[Any] = object()


def _without(obj: Mapping[str, Any], keys: tuple[str, ...]) -> Mapping[str, Any]:
    """C{obj} less C{keys}: C{obj} itself when it holds none of them."""
    trimmed: dict[str, Any] | None = None
    for key in keys:
        if key in obj:
            if trimmed is None:
                trimmed = dict(obj)
            del trimmed[key]
    return obj if trimmed is None else trimmed


def _with(obj: Mapping[str, Any], key: str, value: object) -> Mapping[str, Any]:
    """A copy of C{obj} with C{key} set to C{value}."""
    changed = dict(obj)
    changed[key] = value
    return changed


def _each(spelling: Spelling, items: list[Any], walk: Callable[[Spelling, Any], Any]) -> list[Any]:
    """C{items} walked one by one: the same list when no item changed."""
    changed: list[Any] | None = None
    for index, item in enumerate(items):
        new = walk(spelling, item)
        if new is not item:
            if changed is None:
                changed = list(items)
            changed[index] = new
    return items if changed is None else changed


def _listed(
    spelling: Spelling,
    out: dict[str, Any],
    key: str,
    walk: Callable[[Spelling, Any], Any],
) -> None:
    """Walk the list C{out[key]}, replacing it only when something in it changed."""
    items = out.get(key)
    if isinstance(items, list):
        new = _each(spelling, items, walk)
        if new is not items:
            out[key] = new


# -- objects -------------------------------------------------------------------------


def _annotated(spelling: Spelling, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """C{obj} with its C{annotations} spelled down."""
    annotations = obj.get("annotations")
    if spelling.annotations_drop and isinstance(annotations, Mapping):
        new = _without(annotations, spelling.annotations_drop)
        if new is not annotations:
            return _with(obj, "annotations", new)
    return obj


def _tool(spelling: Spelling, tool: Any) -> Any:
    if not isinstance(tool, Mapping):
        return tool
    out = _without(tool, spelling.tool_drop)
    if spelling.object_output_schema and "outputSchema" in out:
        schema = out["outputSchema"]
        if not (isinstance(schema, Mapping) and schema.get("type") == "object"):
            # Earlier revisions only describe object results; a tool whose
            # results are something else simply declares no schema to them.
            out = _without(out, ("outputSchema",))
    return out


def _argument(spelling: Spelling, argument: Any) -> Any:
    return _without(argument, spelling.argument_drop) if isinstance(argument, Mapping) else argument


def _prompt(spelling: Spelling, prompt: Any) -> Any:
    if not isinstance(prompt, Mapping):
        return prompt
    out = _without(prompt, spelling.prompt_drop)
    arguments = out.get("arguments")
    if spelling.argument_drop and isinstance(arguments, list):
        new = _each(spelling, arguments, _argument)
        if new is not arguments:
            out = _with(out, "arguments", new)
    return out


def _resource(spelling: Spelling, resource: Any) -> Any:
    if not isinstance(resource, Mapping):
        return resource
    return _annotated(spelling, _without(resource, spelling.resource_drop))


def _template(spelling: Spelling, template: Any) -> Any:
    if not isinstance(template, Mapping):
        return template
    return _annotated(spelling, _without(template, spelling.template_drop))


def _contents(spelling: Spelling, contents: Any) -> Any:
    if not isinstance(contents, Mapping):
        return contents
    return _without(contents, spelling.contents_drop)


def _capabilities(spelling: Spelling, capabilities: Mapping[str, Any]) -> Mapping[str, Any]:
    kept: dict[str, Any] | None = None
    for key, value in capabilities.items():
        new = value
        if key not in spelling.capabilities:
            new = _MISSING
        else:
            children = spelling.capability_children_drop.get(key)
            if children and isinstance(value, Mapping):
                new = _without(value, children)
        if new is not value and kept is None:
            kept = dict(capabilities)
        if kept is not None:
            if new is _MISSING:
                del kept[key]
            else:
                kept[key] = new
    return capabilities if kept is None else kept


# -- content blocks ------------------------------------------------------------------


def _block(spelling: Spelling, block: Any) -> Any:
    """One content block as C{spelling}'s revision can carry it."""
    # Every block of every legacy call's result: a dict is told without the ABC.
    if not (type(block) is dict or isinstance(block, Mapping)):
        return block
    kind = block.get("type")
    if kind == "audio" and not spelling.audio:
        return _trace(spelling, block, audio_text(block, spelling.revision))
    if kind == "resource_link" and not spelling.resource_link:
        return _trace(spelling, block, link_text(block))
    out = _annotated(spelling, _without(block, spelling.content_drop))
    if kind == "resource_link":
        out = _without(out, spelling.link_drop)
    elif kind == "resource" and spelling.contents_drop:
        embedded = out.get("resource")
        new = _contents(spelling, embedded)
        if new is not embedded:
            out = _with(out, "resource", new)
    return out


def _trace(spelling: Spelling, block: Mapping[str, Any], text: str) -> dict[str, Any]:
    """A text block standing in for C{block}, keeping the annotations the revision has."""
    trace: dict[str, Any] = {"type": "text", "text": text}
    annotations = block.get("annotations")
    if isinstance(annotations, Mapping) and "annotations" not in spelling.content_drop:
        trace["annotations"] = _without(annotations, spelling.annotations_drop)
    return trace


# -- results -------------------------------------------------------------------------


def _generic(spelling: Spelling, result: Mapping[str, Any]) -> dict[str, Any]:
    """A top-level copy of C{result} without the fields every result may lack."""
    out = dict(result)
    for key in spelling.result_drop:
        out.pop(key, None)
    meta = out.get("_meta")
    # Most results carry no _meta, and the rest a dict: told without the ABC.
    if (
        spelling.meta_drop
        and meta is not None
        and (type(meta) is dict or isinstance(meta, Mapping))
    ):
        new = _without(meta, spelling.meta_drop)
        if new is not meta:
            if new:
                out["_meta"] = new
            else:
                # It held only what this revision lacks.
                del out["_meta"]
    return out


def _call_result(spelling: Spelling, result: Mapping[str, Any]) -> dict[str, Any]:
    out = _generic(spelling, result)
    _listed(spelling, out, "content", _block)
    if "structuredContent" in out:
        value = out["structuredContent"]
        if not spelling.structured or (
            spelling.object_structured and not isinstance(value, Mapping)
        ):
            del out["structuredContent"]
            content = out.get("content")
            blocks = list(content) if isinstance(content, list) else []
            # Judged against the content as the server sent it: a block this revision
            # cannot carry (audio before 2025-03-26) is not brought back as base64 text.
            original = result.get("content")
            sent = original if isinstance(original, list) else []
            if not carries_as_json(blocks, value) and not repeats_payloads(sent, value):
                blocks.append({"type": "text", "text": json.dumps(value, ensure_ascii=False)})
                out["content"] = blocks
    return out


def _message(spelling: Spelling, message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message
    content = message.get("content")
    new = (
        _each(spelling, content, _block) if isinstance(content, list) else _block(spelling, content)
    )
    return message if new is content else _with(message, "content", new)


def _prompt_result(spelling: Spelling, result: Mapping[str, Any]) -> dict[str, Any]:
    out = _generic(spelling, result)
    _listed(spelling, out, "messages", _message)
    return out


def _list_walker(
    key: str, walk: Callable[[Spelling, Any], Any]
) -> Callable[[Spelling, Mapping[str, Any]], dict[str, Any]]:
    def walk_list(spelling: Spelling, result: Mapping[str, Any]) -> dict[str, Any]:
        out = _generic(spelling, result)
        _listed(spelling, out, key, walk)
        return out

    walk_list.__name__ = f"_walk_{key}"
    return walk_list


def _server_description(spelling: Spelling, result: Mapping[str, Any]) -> dict[str, Any]:
    """C{initialize} and C{server/discover}: who the server is and what it can do."""
    out = _generic(spelling, result)
    info = out.get("serverInfo")
    if isinstance(info, Mapping):
        new_info = _without(info, spelling.implementation_drop)
        if new_info is not info:
            out["serverInfo"] = new_info
    capabilities = out.get("capabilities")
    if isinstance(capabilities, Mapping):
        new_capabilities = _capabilities(spelling, capabilities)
        if new_capabilities is not capabilities:
            out["capabilities"] = new_capabilities
    return out


_Walker = Callable[[Spelling, Mapping[str, Any]], dict[str, Any]]
_Plan = Callable[[Mapping[str, Any]], dict[str, Any]]


#: Per method: how its result is walked, and what, besides the top-level
#: fields, can make a revision need the walk at all.
_METHODS: Final[Mapping[str, tuple[_Walker, Callable[[Spelling], bool]]]] = {
    "initialize": (
        _server_description,
        lambda s: bool(s.implementation_drop) or s.capabilities_narrower,
    ),
    "server/discover": (
        _server_description,
        lambda s: bool(s.implementation_drop) or s.capabilities_narrower,
    ),
    "tools/list": (
        _list_walker("tools", _tool),
        lambda s: bool(s.tool_drop) or s.object_output_schema,
    ),
    "tools/call": (
        _call_result,
        lambda s: s.touches_content or not s.structured or s.object_structured,
    ),
    # 2025-11-25 answers tasks/result with the result of the task's request,
    # and tools/call is the only request a server runs as a task.
    "tasks/result": (
        _call_result,
        lambda s: s.touches_content or not s.structured or s.object_structured,
    ),
    "prompts/list": (
        _list_walker("prompts", _prompt),
        lambda s: bool(s.prompt_drop or s.argument_drop),
    ),
    "prompts/get": (_prompt_result, lambda s: s.touches_content),
    "resources/list": (
        _list_walker("resources", _resource),
        lambda s: bool(s.resource_drop or s.annotations_drop),
    ),
    "resources/templates/list": (
        _list_walker("resourceTemplates", _template),
        lambda s: bool(s.template_drop or s.annotations_drop),
    ),
    "resources/read": (
        _list_walker("contents", _contents),
        lambda s: bool(s.contents_drop),
    ),
}


def _plan(walker: _Walker, spelling: Spelling, needed: bool) -> _Plan | None:
    return partial(walker, spelling) if needed else None


# Per revision: the plans by method, and the plan for any other method.  One
# lookup by revision serves both, since an enum member hashes in Python.
_PLANS: Final[Mapping[Revision, tuple[Mapping[str, _Plan | None], _Plan | None]]] = {
    rev: (
        {
            method: _plan(walker, sp, sp.touches_results or needs(sp))
            for method, (walker, needs) in _METHODS.items()
        },
        _plan(_generic, sp, sp.touches_results),
    )
    for rev, sp in SPELLINGS.items()
}
#: 2026-07-28's, which L{envelope} spells every result for: not looked up each time.
_MODERN_PLANS, _MODERN_GENERIC = _PLANS[Revision.V2026_07_28]


def downgrade(result: Mapping[str, Any], method: str, revision: Revision) -> Mapping[str, Any]:
    """
    C{result}, built in the newest shape, as a peer on C{revision} may receive it.

    Fields, capabilities and content types C{revision} lacks are removed, with
    a faithful stand-in where they carry information: structured content is
    also given as JSON text (unless a text block already holds the same JSON),
    an audio block becomes a text block naming its type and size, a resource
    link becomes a text block with its URI, name and description.

    The returned object must be treated as read-only.

    @param result: the result of C{method}; never modified.
    @param method: the request it answers.  Methods without rules of their own
        only lose top-level fields (C{resultType}, cache hints, the server's
        identity in C{_meta}).
    @return: C{result} itself when C{revision} has every field a result of
        C{method} could carry; otherwise a new object that shares with
        C{result} every nested object nothing was taken from.
    """
    plans, generic = _PLANS[revision]
    plan = plans.get(method, generic)
    if plan is None:
        return result
    spelled: Mapping[str, Any] = plan(result)
    return spelled


def _milliseconds(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def envelope(
    result: Mapping[str, Any],
    method: str,
    *,
    server_info: Mapping[str, Any],
    list_max_age: float,
    read_max_age: float,
) -> dict[str, Any]:
    """
    C{result} wrapped as 2026-07-28 wants every result: a copy with
    C{resultType}, the server's identity in C{_meta} and, on the results the
    schema makes cacheable, C{ttlMs} and C{cacheScope}.

    It spells C{result} down for 2026-07-28 first, as L{downgrade} does, so
    it alone turns a newest-shape result into a 2026-07-28 one.

    C{resultType} is C{"complete"} unless the result is already an
    C{input_required} question or a C{task}; those are interim answers and carry
    no cache hints (a task's own C{ttlMs}, its lifetime, is left alone).

    @param server_info: the C{Implementation} naming mcpx.
    @param list_max_age: seconds a client may reuse C{server/discover} and the
        lists that follow configuration (C{protoMessages.listMaxAge}).
    @param read_max_age: seconds a client may reuse C{resources/list} and
        C{resources/read} (C{protoMessages.readMaxAge}).
    @return: a new top-level object; C{result} is not modified.
    """
    # The envelope is the whole of the 2026-07-28 spelling: what that
    # revision dropped (C{Tool.execution}, core C{tasks}) goes here too, so a
    # caller never has to remember a second step.
    # L{downgrade} for 2026-07-28, its plans at hand.
    plan = _MODERN_PLANS.get(method, _MODERN_GENERIC)
    out = dict(result if plan is None else plan(result))
    kind = out.get("resultType")
    if kind not in _INTERIM_RESULT_TYPES:
        out["resultType"] = kind = "complete"
    meta = out.get("_meta")
    # Most results carry no _meta, and the rest a dict: no Mapping check for those.
    if meta is None:
        tagged = {}
    elif type(meta) is dict or isinstance(meta, Mapping):
        tagged = dict(meta)
    else:
        tagged = {}
    tagged[SERVER_INFO_KEY] = server_info
    out["_meta"] = tagged
    scope = CACHE_SCOPES.get(method)
    if kind == "complete" and scope is not None:
        age = list_max_age if scope == "public" else read_max_age
        out["ttlMs"] = _milliseconds(age)
        out["cacheScope"] = scope
    elif kind == "input_required":
        out.pop("ttlMs", None)
        out.pop("cacheScope", None)
    return out
