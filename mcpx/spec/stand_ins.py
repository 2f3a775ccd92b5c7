# -*- test-case-name: tests.spec.test_downgrade -*-
"""
The text that stands in for what a revision cannot carry (an audio block, a resource
link, structured content), and whether the text already sent carries it, so that
nothing is said twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from mcpx.spec.revision import Revision

#: First characters of the JSON texts that might repeat a structured result.
_JSON_STARTS: Final = frozenset('{["-0123456789tfn')


def _decoded_size(data: str) -> int:
    """How many bytes the base64 text C{data} decodes to, without decoding it."""
    data = data.strip()
    padding = 2 if data.endswith("==") else 1 if data.endswith("=") else 0
    return max(0, len(data) * 3 // 4 - padding)


def audio_text(block: Mapping[str, Any], revision: Revision) -> str:
    """The text an audio block becomes for a revision without audio."""
    mime = block.get("mimeType")
    data = block.get("data")
    what = str(mime) if isinstance(mime, str) and mime else "audio of unknown type"
    if isinstance(data, str):
        what += f", {_decoded_size(data)} bytes"
    return f"[audio content ({what}) left out: MCP {revision} cannot carry audio]"


def link_text(block: Mapping[str, Any]) -> str:
    """The text a resource link becomes for a revision without links."""
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


def carries_as_json(blocks: Iterable[Any], value: object) -> bool:
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


def repeats_payloads(blocks: Iterable[Any], value: object) -> bool:
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
