# -*- test-case-name: tests.server.test_discovery_bytes -*-
"""
An op's answer with its JSON already written, for an answer assembled from parts whose
JSON is kept (C{mcpx_tools}: each server's tool summaries), so that neither the gateway's
tool result nor the JSON-RPC answer encodes it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpx.wire.messages import EncodedList, EncodedResult

#: How the text block of a gateway tool's result begins and ends in its encoded content.
CONTENT_HEAD = b'[{"type":"text","text":'
CONTENT_TAIL = b"}]"


class WrittenAnswer(dict[str, Any]):
    """
    An answer, with what a gateway tool's result carries of it already written: its text
    as C{json.dumps(answer, ensure_ascii=False)} writes it, that text as the result's
    C{content} (one text block) and the answer as its C{structuredContent}, each with its
    encoding.  Never modify one, nor what it holds: it may be answered many times over.

    @ivar text: the text.
    @ivar content: the C{content}, an L{EncodedList}.
    @ivar structured: the C{structuredContent}, an L{EncodedResult}.
    """

    __slots__ = ("content", "structured", "text")

    def __init__(
        self, answer: Mapping[str, Any], *, json: bytes, text: str, content_json: bytes
    ) -> None:
        """
        @param json: L{mcpx.wire.messages.utf8_json} of C{answer}.
        @param content_json: the same of the C{content}: the text block's, between
            L{CONTENT_HEAD} and L{CONTENT_TAIL}.
        """
        super().__init__(answer)
        self.text = text
        self.content = EncodedList([{"type": "text", "text": text}], content_json)
        self.structured = EncodedResult(answer, json)
