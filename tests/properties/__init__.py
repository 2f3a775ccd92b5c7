"""
Property tests over hostile input, with C{hypothesis}: framing, JSON-RPC parsing, the HTTP
entry points and C{downgrade()}.

Every suite is derandomized (the same examples on every run, so a failure reproduces and CI
cannot flake), keeps no example database, and runs a bounded number of examples, so the
whole package stays well under a minute.
"""

from __future__ import annotations

import json
from typing import Any, Final

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: The settings every property here runs under; C{examples} bounds each test's run.
_BASE: Final = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    "print_blob": False,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


def bounded(examples: int) -> settings:
    """Deterministic settings running C{examples} examples."""
    return settings(max_examples=examples, **_BASE)  # type: ignore[arg-type]


#: Keys that mean something to mcpx or to MCP, so that generated objects often hit the code
#: that looks inside them, mixed with arbitrary ones.
MCP_KEYS: Final = (
    "jsonrpc",
    "id",
    "method",
    "params",
    "result",
    "error",
    "code",
    "message",
    "data",
    "_meta",
    "name",
    "title",
    "description",
    "server",
    "tool",
    "arguments",
    "uri",
    "ref",
    "argument",
    "value",
    "task",
    "progress",
    "timeout",
    "content",
    "structuredContent",
    "isError",
    "type",
    "text",
    "mimeType",
    "annotations",
    "tools",
    "prompts",
    "resources",
    "resourceTemplates",
    "contents",
    "messages",
    "role",
    "inputSchema",
    "outputSchema",
    "execution",
    "icons",
    "capabilities",
    "serverInfo",
    "protocolVersion",
    "resultType",
    "nextCursor",
    "cursor",
    "size",
    "blob",
)

scalars: Final = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(
        [
            "text",
            "image",
            "audio",
            "resource",
            "resource_link",
            "2.0",
            "files",
            "read_file",
            # Lone surrogates: valid as JSON escapes, not encodable as UTF-8.
            "\ud800",
            "a\udfffb",
        ]
    )
)

keys: Final = st.sampled_from(MCP_KEYS) | st.text(max_size=8)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=5)


#: Any JSON value, nesting a few levels, with keys that mcpx reads.
json_values: Final = st.recursive(scalars, _containers, max_leaves=25)

#: Any JSON object.
json_objects: Final = st.dictionaries(keys, json_values, max_size=6)


def hostile_json_text(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8")


#: Bytes that are meant to break a JSON reader: almost-JSON, deep nesting, huge and non-finite
#: numbers, bad UTF-8, or just anything.
hostile_bytes: Final = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda text: text.encode("utf-8", "surrogatepass")),
    json_values.map(hostile_json_text),
    st.integers(min_value=90, max_value=3000).map(lambda depth: b"[" * depth + b"]" * depth),
    st.integers(min_value=90, max_value=3000).map(lambda depth: b'{"a":' * depth),
    st.sampled_from(
        [
            b"NaN",
            b"[Infinity]",
            b'{"a":-Infinity}',
            b'{"a":1e400}',
            b'{"a":-1e99999}',
            b"[" + b"9" * 5000 + b"]",
            b'"\\ud800"',
            b'{"a":"\\udfff"}',
            b"\xef\xbb\xbf{}",
            b"{}{}",
            b"",
            b" ",
            b"null",
        ]
    ),
)
