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
    import, into one L{_Spelling} per revision;
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
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, Final

from attrs import frozen

from mcpx.spec.matrix import MATRIX, Kind, capability_in, content_type_in, field_in
from mcpx.spec.revision import ALL_REVISIONS, Revision

#: The result C{_meta} key that names the server (2026-07-28).
SERVER_INFO_META: Final = "io.modelcontextprotocol/serverInfo"

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

# The matrix has no rows for these yet, so they are read from the revision
# order instead.  Each is named where it is used.
#
# Rows "Prompt._meta", "Resource._meta", "ResourceTemplate._meta" and
# "ResourceContents._meta": 2025-06-18 gave _meta to every type (the matrix
# only records it for Tool and for content blocks).
_WIDESPREAD_META: Final = Revision.V2025_06_18
# Row "PromptArgument.title": BaseMetadata.title, added by 2025-06-18.
_ARGUMENT_TITLE: Final = Revision.V2025_06_18
# Row for the 2026-07-28 shape change of "CallToolResult.structuredContent" and
# "Tool.outputSchema" (any JSON value / any schema, where earlier revisions
# asked for an object): only the matrix notes mention it.
_ANY_STRUCTURED: Final = Revision.V2026_07_28

#: First characters of the JSON texts that might repeat a structured result.
_JSON_STARTS: Final = frozenset('{["-0123456789tfn')


@frozen
class _Spelling:
    """
    What one revision lacks, as the walkers below need it.

    Each C{*_drop} tuple lists the keys to take out of one kind of object; an
    empty tuple means that revision has all of them.
    """

    revision: Revision
    #: Top-level result fields: C{resultType}, C{ttlMs}, C{cacheScope}.
    result_drop: tuple[str, ...]
    #: Keys of the top-level result C{_meta}.
    meta_drop: tuple[str, ...]
    tool_drop: tuple[str, ...]
    #: C{Tool.outputSchema} must describe an object (before 2026-07-28).
    object_output_schema: bool
    prompt_drop: tuple[str, ...]
    argument_drop: tuple[str, ...]
    resource_drop: tuple[str, ...]
    template_drop: tuple[str, ...]
    implementation_drop: tuple[str, ...]
    #: Fields of every content block (C{_meta}, C{annotations}).
    content_drop: tuple[str, ...]
    #: Fields of an C{Annotations} object.
    annotations_drop: tuple[str, ...]
    #: Fields of a C{resource_link} block beyond L{content_drop}.
    link_drop: tuple[str, ...]
    #: Fields of the contents of a resource (read, or embedded in a block).
    contents_drop: tuple[str, ...]
    audio: bool
    resource_link: bool
    #: C{CallToolResult.structuredContent} exists at all.
    structured: bool
    #: ... and must be a JSON object (before 2026-07-28).
    object_structured: bool
    #: The server capabilities this revision defines.
    capabilities: frozenset[str]
    #: Per capability, the sub-capabilities other revisions have and this one lacks.
    capability_children_drop: Mapping[str, tuple[str, ...]]
    #: Whether some capability a result could name is unknown to this revision.
    capabilities_narrower: bool

    @property
    def touches_results(self) -> bool:
        """Whether every result needs something taken from its top level."""
        return bool(self.result_drop or self.meta_drop)

    @property
    def touches_content(self) -> bool:
        """Whether some content block may need spelling down."""
        return bool(
            self.content_drop
            or self.annotations_drop
            or self.link_drop
            or self.contents_drop
            or not self.audio
            or not self.resource_link
        )


def _absent(revision: Revision, pairs: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """The keys whose matrix row (the second of each pair) C{revision} lacks."""
    return tuple(key for key, row in pairs if not field_in(row, revision))


def _before(revision: Revision, floor: Revision, key: str) -> tuple[str, ...]:
    """C{(key,)} when C{revision} is older than C{floor}: for fields the matrix lacks."""
    return (key,) if revision < floor else ()


def _spelling(revision: Revision) -> _Spelling:
    meta = _before(revision, _WIDESPREAD_META, "_meta")
    annotations = _absent(revision, [("annotations", "annotations")])
    # Only core rows: a capability an extension contributes is the caller's to
    # declare, and "extensions" (like "experimental") is an open map.
    core = [row for row in MATRIX.rows if row.kind is Kind.SERVER_CAPABILITY and not row.extension]
    tops = {row.name for row in core if "." not in row.name}
    present = frozenset(name for name in tops if capability_in("server", name, revision))
    children: dict[str, list[str]] = {}
    for row in core:
        top, dot, child = row.name.partition(".")
        if dot and top in present and not row.present_in(revision):
            children.setdefault(top, []).append(child)
    return _Spelling(
        revision=revision,
        result_drop=_absent(
            revision,
            [
                ("resultType", "Result.resultType"),
                ("ttlMs", "CacheableResult.ttlMs"),
                ("cacheScope", "CacheableResult.cacheScope"),
            ],
        ),
        meta_drop=_absent(revision, [(SERVER_INFO_META, f'_meta["{SERVER_INFO_META}"]')]),
        tool_drop=_absent(
            revision,
            [
                ("title", "Tool.title"),
                ("icons", "Tool.icons"),
                ("annotations", "Tool.annotations"),
                ("execution", "Tool.execution"),
                ("outputSchema", "Tool.outputSchema"),
                ("_meta", "Tool._meta"),
            ],
        ),
        object_output_schema=(
            field_in("Tool.outputSchema", revision) and revision < _ANY_STRUCTURED
        ),
        prompt_drop=_absent(revision, [("title", "Prompt.title"), ("icons", "Prompt.icons")])
        + meta,
        argument_drop=_before(revision, _ARGUMENT_TITLE, "title"),
        resource_drop=_absent(revision, [("title", "Resource.title"), ("icons", "Resource.icons")])
        + meta
        + annotations,
        template_drop=_absent(
            revision,
            [("title", "ResourceTemplate.title"), ("icons", "ResourceTemplate.icons")],
        )
        + meta
        + annotations,
        implementation_drop=_absent(
            revision,
            [
                ("title", "Implementation.title"),
                ("description", "Implementation.description"),
                ("icons", "Implementation.icons"),
                ("websiteUrl", "Implementation.websiteUrl"),
            ],
        ),
        content_drop=_absent(revision, [("_meta", "content._meta")]) + annotations,
        annotations_drop=_absent(revision, [("lastModified", "Annotations.lastModified")]),
        link_drop=_absent(revision, [("icons", "ResourceLink.icons")]),
        contents_drop=meta,
        audio=content_type_in("audio", revision),
        resource_link=content_type_in("resource_link", revision),
        structured=field_in("CallToolResult.structuredContent", revision),
        object_structured=revision < _ANY_STRUCTURED,
        capabilities=present,
        capability_children_drop={top: tuple(names) for top, names in children.items()},
        capabilities_narrower=present != tops or bool(children),
    )


_SPELLINGS: Final[Mapping[Revision, _Spelling]] = {rev: _spelling(rev) for rev in ALL_REVISIONS}


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


def _each(
    spelling: _Spelling, items: list[Any], walk: Callable[[_Spelling, Any], Any]
) -> list[Any]:
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
    spelling: _Spelling,
    out: dict[str, Any],
    key: str,
    walk: Callable[[_Spelling, Any], Any],
) -> None:
    """Walk the list C{out[key]}, replacing it only when something in it changed."""
    items = out.get(key)
    if isinstance(items, list):
        new = _each(spelling, items, walk)
        if new is not items:
            out[key] = new


# -- objects -------------------------------------------------------------------------


def _annotated(spelling: _Spelling, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """C{obj} with its C{annotations} spelled down."""
    annotations = obj.get("annotations")
    if spelling.annotations_drop and isinstance(annotations, Mapping):
        new = _without(annotations, spelling.annotations_drop)
        if new is not annotations:
            return _with(obj, "annotations", new)
    return obj


def _tool(spelling: _Spelling, tool: Any) -> Any:
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


def _argument(spelling: _Spelling, argument: Any) -> Any:
    return _without(argument, spelling.argument_drop) if isinstance(argument, Mapping) else argument


def _prompt(spelling: _Spelling, prompt: Any) -> Any:
    if not isinstance(prompt, Mapping):
        return prompt
    out = _without(prompt, spelling.prompt_drop)
    arguments = out.get("arguments")
    if spelling.argument_drop and isinstance(arguments, list):
        new = _each(spelling, arguments, _argument)
        if new is not arguments:
            out = _with(out, "arguments", new)
    return out


def _resource(spelling: _Spelling, resource: Any) -> Any:
    if not isinstance(resource, Mapping):
        return resource
    return _annotated(spelling, _without(resource, spelling.resource_drop))


def _template(spelling: _Spelling, template: Any) -> Any:
    if not isinstance(template, Mapping):
        return template
    return _annotated(spelling, _without(template, spelling.template_drop))


def _contents(spelling: _Spelling, contents: Any) -> Any:
    if not isinstance(contents, Mapping):
        return contents
    return _without(contents, spelling.contents_drop)


def _capabilities(spelling: _Spelling, capabilities: Mapping[str, Any]) -> Mapping[str, Any]:
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


def _block(spelling: _Spelling, block: Any) -> Any:
    """One content block as C{spelling}'s revision can carry it."""
    if not isinstance(block, Mapping):
        return block
    kind = block.get("type")
    if kind == "audio" and not spelling.audio:
        return _trace(spelling, block, _audio_text(block, spelling.revision))
    if kind == "resource_link" and not spelling.resource_link:
        return _trace(spelling, block, _link_text(block))
    out = _annotated(spelling, _without(block, spelling.content_drop))
    if kind == "resource_link":
        out = _without(out, spelling.link_drop)
    elif kind == "resource" and spelling.contents_drop:
        embedded = out.get("resource")
        new = _contents(spelling, embedded)
        if new is not embedded:
            out = _with(out, "resource", new)
    return out


def _trace(spelling: _Spelling, block: Mapping[str, Any], text: str) -> dict[str, Any]:
    """A text block standing in for C{block}, keeping the annotations the revision has."""
    trace: dict[str, Any] = {"type": "text", "text": text}
    annotations = block.get("annotations")
    if isinstance(annotations, Mapping) and "annotations" not in spelling.content_drop:
        trace["annotations"] = _without(annotations, spelling.annotations_drop)
    return trace


def _decoded_size(data: str) -> int:
    """How many bytes the base64 text C{data} decodes to, without decoding it."""
    data = data.strip()
    padding = 2 if data.endswith("==") else 1 if data.endswith("=") else 0
    return max(0, len(data) * 3 // 4 - padding)


def _audio_text(block: Mapping[str, Any], revision: Revision) -> str:
    mime = block.get("mimeType")
    data = block.get("data")
    what = str(mime) if isinstance(mime, str) and mime else "audio of unknown type"
    if isinstance(data, str):
        what += f", {_decoded_size(data)} bytes"
    return f"[audio content ({what}) left out: MCP {revision} cannot carry audio]"


def _link_text(block: Mapping[str, Any]) -> str:
    lines = [f"Linked resource: {block.get('uri', '')}", f"Name: {block.get('name', '')}"]
    for key, label in (("title", "Title"), ("description", "Description"), ("mimeType", "Type")):
        value = block.get(key)
        if isinstance(value, str) and value:
            lines.append(f"{label}: {value}")
    size = block.get("size")
    if isinstance(size, int) and not isinstance(size, bool):
        lines.append(f"Size: {size} bytes")
    return "\n".join(lines)


def _same_json(loaded: object, value: object) -> bool:
    if isinstance(loaded, bool) or isinstance(value, bool):
        return loaded is value
    return loaded == value


def _carries(blocks: Iterable[Any], value: object) -> bool:
    """Whether a text block among C{blocks} already holds C{value} as JSON."""
    for block in blocks:
        if not isinstance(block, Mapping) or block.get("type") != "text":
            continue
        text = block.get("text")
        if not isinstance(text, str) or text.lstrip()[:1] not in _JSON_STARTS:
            continue
        try:
            loaded = json.loads(text)
        except ValueError:
            continue
        if _same_json(loaded, value):
            return True
    return False


#: A string this long inside structured content is a payload (a file's text, a
#: media block's base64), not a label; shorter ones are field names and values.
_PAYLOAD_LENGTH: Final = 64


def _payloads(blocks: Iterable[Any]) -> set[str]:
    """The long strings content blocks carry: texts, base64 data, embedded resources."""
    found: set[str] = set()
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        candidates = [block.get("text"), block.get("data")]
        resource = block.get("resource")
        if isinstance(resource, Mapping):
            candidates += [resource.get("text"), resource.get("blob")]
        found.update(c for c in candidates if isinstance(c, str) and len(c) >= _PAYLOAD_LENGTH)
    return found


def _repeats_payloads(blocks: Iterable[Any], value: object) -> bool:
    """
    Whether C{value} is mostly a copy of what C{blocks} already carry: its long strings
    are all found in them verbatim, and they make up nearly all of its JSON.

    A file-reading server answers C{{"content": <the text>}} beside the text block, a
    media reader the image again inside structured content; turned into text for an
    older client, that copy would only repeat the file, or its base64, once more.
    """
    carried = _payloads(blocks)
    if not carried:
        return False
    repeated = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) >= _PAYLOAD_LENGTH:
                if item not in carried:
                    return False
                repeated += len(item)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return repeated > 0 and repeated >= 0.9 * len(json.dumps(value, ensure_ascii=False))


# -- results -------------------------------------------------------------------------


def _generic(spelling: _Spelling, result: Mapping[str, Any]) -> dict[str, Any]:
    """A top-level copy of C{result} without the fields every result may lack."""
    out = dict(result)
    for key in spelling.result_drop:
        out.pop(key, None)
    meta = out.get("_meta")
    if spelling.meta_drop and isinstance(meta, Mapping):
        new = _without(meta, spelling.meta_drop)
        if new is not meta:
            if new:
                out["_meta"] = new
            else:
                # It held only what this revision lacks.
                del out["_meta"]
    return out


def _call_result(spelling: _Spelling, result: Mapping[str, Any]) -> dict[str, Any]:
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
            if not _carries(blocks, value) and not _repeats_payloads(sent, value):
                blocks.append({"type": "text", "text": json.dumps(value, ensure_ascii=False)})
                out["content"] = blocks
    return out


def _message(spelling: _Spelling, message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message
    content = message.get("content")
    new = (
        _each(spelling, content, _block) if isinstance(content, list) else _block(spelling, content)
    )
    return message if new is content else _with(message, "content", new)


def _prompt_result(spelling: _Spelling, result: Mapping[str, Any]) -> dict[str, Any]:
    out = _generic(spelling, result)
    _listed(spelling, out, "messages", _message)
    return out


def _list_walker(
    key: str, walk: Callable[[_Spelling, Any], Any]
) -> Callable[[_Spelling, Mapping[str, Any]], dict[str, Any]]:
    def walk_list(spelling: _Spelling, result: Mapping[str, Any]) -> dict[str, Any]:
        out = _generic(spelling, result)
        _listed(spelling, out, key, walk)
        return out

    walk_list.__name__ = f"_walk_{key}"
    return walk_list


def _server_description(spelling: _Spelling, result: Mapping[str, Any]) -> dict[str, Any]:
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


_Walker = Callable[[_Spelling, Mapping[str, Any]], dict[str, Any]]
_Plan = Callable[[Mapping[str, Any]], dict[str, Any]]


#: Per method: how its result is walked, and what, besides the top-level
#: fields, can make a revision need the walk at all.
_METHODS: Final[Mapping[str, tuple[_Walker, Callable[[_Spelling], bool]]]] = {
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


def _plan(walker: _Walker, spelling: _Spelling, needed: bool) -> _Plan | None:
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
    for rev, sp in _SPELLINGS.items()
}


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
    out = dict(downgrade(result, method, Revision.V2026_07_28))
    kind = out.get("resultType")
    if kind not in _INTERIM_RESULT_TYPES:
        out["resultType"] = kind = "complete"
    meta = out.get("_meta")
    tagged = dict(meta) if isinstance(meta, Mapping) else {}
    tagged[SERVER_INFO_META] = server_info
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


#: The params fields of the questions a server asks that some revisions lack, by method.
_QUESTION_FIELDS: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    "elicitation/create": (
        ("mode", "ElicitRequest.params.mode"),
        ("task", "ElicitRequest.params.task"),
    ),
    "sampling/createMessage": (
        ("tools", "CreateMessageRequest.params.tools"),
        ("toolChoice", "CreateMessageRequest.params.toolChoice"),
        ("task", "CreateMessageRequest.params.task"),
    ),
}


def question(method: str, params: Mapping[str, Any], revision: Revision) -> dict[str, Any]:
    """
    The params of a question (C{elicitation/create}, C{sampling/createMessage},
    C{roots/list}) an upstream asked, spelled for a client on C{revision}: a form
    elicitation loses C{mode}, which 2025-06-18 does not have, and no question keeps a
    field its revision lacks; a form before 2025-11-25 loses its multi-select fields,
    which that revision's forms cannot hold.  Which questions a client may be asked at
    all (url mode, sampling with tools) is its capabilities' business, decided before.

    @return: C{params} itself (as a C{dict}) when nothing had to go.
    """
    fields = _QUESTION_FIELDS.get(method, ())
    absent = [key for key, name in fields if key in params and not field_in(name, revision)]
    spelled = dict(params) if absent or not isinstance(params, dict) else params
    for key in absent:
        del spelled[key]
    if method == "elicitation/create" and not field_in(_MULTI_SELECT, revision):
        form = _without_multi_select(params.get("requestedSchema"))
        if form is not None:
            spelled = {**spelled, "requestedSchema": form}
    return spelled


#: The matrix's name for the enum fields 2025-11-25 added, multi-select among them.
_MULTI_SELECT: Final = "elicitation enums: titled and multi-select"


def _without_multi_select(form: object) -> dict[str, Any] | None:
    """
    C{form} without its multi-select (array) fields, which a form before 2025-11-25
    cannot hold: such a client is asked the rest and answers without them.  C{None}
    when C{form} has none.
    """
    if not isinstance(form, Mapping):
        return None
    properties = form.get("properties")
    if not isinstance(properties, Mapping):
        return None
    arrays = {
        name
        for name, field in properties.items()
        if isinstance(field, Mapping) and field.get("type") == "array"
    }
    if not arrays:
        return None
    kept = dict(form)
    kept["properties"] = {k: v for k, v in properties.items() if k not in arrays}
    required = form.get("required")
    if isinstance(required, list):
        kept["required"] = [name for name in required if name not in arrays]
    return kept
