# -*- test-case-name: tests.server.test_surface -*-
"""
The results a host gets: an upstream's, with the resource URIs it names in C{mcpx://}
form where the gateway renamed them, and the gateway tools' own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcpx.ops import uris
from mcpx.ops.schemas import MAX_COMPLETION_VALUES
from mcpx.ops.written import WrittenAnswer
from mcpx.server.conn import Context
from mcpx.spec.apps import LEGACY_RESOURCE_URI_KEY, resource_uri
from mcpx.spec.matrix import error_code_in
from mcpx.wire.errors import RESOURCE_NOT_FOUND, RpcError


def _rewrite_block(server: str, block: Any) -> Any:
    """A content block with its resource URI in C{mcpx://} form (a copy when it changes)."""
    if type(block) is not dict:
        return block
    kind = block.get("type")
    if kind == "resource_link":
        uri = block.get("uri")
        if isinstance(uri, str):
            return {**block, "uri": uris.to_mcpx(server, uri)}
    elif kind == "resource":
        resource = block.get("resource")
        if type(resource) is dict and isinstance(resource.get("uri"), str):
            rewritten = {**resource, "uri": uris.to_mcpx(server, resource["uri"])}
            return {**block, "resource": rewritten}
    return block


def _needs_rewrite(block: Any) -> bool:
    return type(block) is dict and block.get("type") in ("resource_link", "resource")


def rewrite_call_result(server: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """
    An upstream C{CallToolResult} as a host may read it: the same, except for the
    resource URIs in its content, which become C{mcpx://} URIs, and the app its own
    C{_meta} names (L{uris.ui_meta_renamed}).  The upstream's dict is returned as is
    when nothing needs rewriting.
    """
    rewritten = result if type(result) is dict else dict(result)
    meta = result.get("_meta")
    if type(meta) is dict and resource_uri(result) is not None:
        rewritten = {**rewritten, "_meta": uris.ui_meta_renamed(server, meta)}
    content = result.get("content")
    if type(content) is not list or not any(_needs_rewrite(block) for block in content):
        return rewritten
    return {**rewritten, "content": [_rewrite_block(server, block) for block in content]}


def with_tool_ui(server: str, tool: Mapping[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """
    C{mcpx_call}'s result for a tool with an app: the result's own C{_meta}, and the
    tool's C{_meta.ui} (and C{ui/resourceUri}) where the result has none of its own, its
    resource under the gateway's name, so a host renders the app of the tool it called
    through C{mcpx_call}.  The result as it is for a tool without an app.
    """
    if resource_uri(tool) is None:
        return result
    meta = uris.ui_meta_renamed(server, tool["_meta"])
    own = result.get("_meta")
    # The result's own _meta is renamed already (L{rewrite_call_result}).
    merged = dict(own) if type(own) is dict else {}
    for key in ("ui", LEGACY_RESOURCE_URI_KEY):
        if key not in merged and key in meta:
            merged[key] = meta[key]
    return {**result, "_meta": merged}


def rewrite_prompt_result(server: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """An upstream C{GetPromptResult}, with the resource URIs of its messages rewritten."""
    messages = result.get("messages")
    if type(messages) is not list:
        return dict(result)
    rewritten = []
    changed = False
    for message in messages:
        if type(message) is dict and _needs_rewrite(message.get("content")):
            block = _rewrite_block(server, message["content"])
            rewritten.append({**message, "content": block})
            changed = True
        else:
            rewritten.append(message)
    if not changed:
        return result if type(result) is dict else dict(result)
    return {**result, "messages": rewritten}


def rewrite_read_result(server: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """An upstream C{ReadResourceResult}, each content's URI rewritten."""
    contents = result.get("contents")
    if type(contents) is not list:
        return dict(result)
    return {
        **result,
        "contents": [
            {**item, "uri": uris.to_mcpx(server, item["uri"])}
            if type(item) is dict and isinstance(item.get("uri"), str)
            else item
            for item in contents
        ],
    }


def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def json_result(body: Any) -> dict[str, Any]:
    """A tool result carrying C{body} as structured content and as its JSON text."""
    # One line, not indented: indentation costs a model tokens on every nested level, and
    # only the unindented form runs in json's C encoder (a 10,000-tool mcpx_tools answer
    # spent most of its time in the pure-Python one).
    if type(body) is WrittenAnswer:
        # Its text and encodings are written already: the same bytes, without the work.
        return {"content": body.content, "structuredContent": body.structured, "isError": False}
    text = json.dumps(body, ensure_ascii=False)
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": body,
        "isError": False,
    }


def exec_result(body: Mapping[str, Any]) -> dict[str, Any]:
    """
    A finished run as a C{CallToolResult}: its output and result as text, the result as
    C{structuredContent} when it is an object, and a C{resource_link} to each file it
    left (spelled down for revisions without them by L{mcpx.spec.downgrade}).
    """
    text = str(body.get("output", ""))
    structured = None
    if "result" in body:
        value = body["result"]
        rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = f"{text}{rendered}" if not text or text.endswith("\n") else f"{text}\n{rendered}"
        if type(value) is dict:
            structured = value
    elif "text" in body:
        text = f"{text}{body['text']}"
    content: list[dict[str, Any]] = [{"type": "text", "text": text or "(no output)"}]
    for artifact in body.get("artifacts", ()):
        link = {"type": "resource_link", "uri": artifact["uri"], "name": artifact["name"]}
        for key in ("mimeType", "size", "description"):
            if key in artifact:
                link[key] = artifact[key]
        content.append(link)
    result: dict[str, Any] = {"content": content, "isError": False}
    if structured is not None:
        result["structuredContent"] = structured
    return result


def capped_completion(result: Mapping[str, Any]) -> dict[str, Any]:
    """
    An upstream C{CompleteResult} as a client may receive it: at most
    L{MAX_COMPLETION_VALUES} values (C{hasMore} set when some were cut), and an empty
    completion for an answer without a list of values.
    """
    completion = result.get("completion")
    if type(completion) is not dict or type(completion.get("values")) is not list:
        return {"completion": {"values": [], "hasMore": False}}
    values = completion["values"]
    if len(values) > MAX_COMPLETION_VALUES:
        completion = {**completion, "values": values[:MAX_COMPLETION_VALUES], "hasMore": True}
    return {**result, "completion": completion}


def resource_not_found(uri: str, context: Context) -> RpcError:
    """The error for a resource nobody offers, with the code C{context}'s revision uses."""
    if error_code_in(RESOURCE_NOT_FOUND, context.revision):
        return RpcError.resource_not_found(uri)
    # 2026-07-28 retired -32002: an unknown resource is bad params there.
    return RpcError.invalid_params(f"Resource not found: {uri}", {"uri": uri})
