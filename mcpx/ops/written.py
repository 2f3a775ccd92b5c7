# -*- test-case-name: tests.server.test_discovery_bytes -*-
"""
An op's answer with its JSON already written, for an answer assembled from parts whose
JSON is kept (C{mcpx_tools}: each server's tool summaries), so that neither the gateway's
text of it nor the JSON-RPC answer encodes it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpx.wire.messages import EncodedResult


class WrittenAnswer(EncodedResult):
    """
    An answer with its compact encoding (C{json}, as L{EncodedResult}), its text as
    C{json.dumps(answer, ensure_ascii=False)} writes it (C{text}), and that text's own
    encoding as a JSON string (C{text_json}).  Never modify one.
    """

    __slots__ = ("text", "text_json")

    def __init__(
        self, answer: Mapping[str, Any], *, json: bytes, text: str, text_json: bytes
    ) -> None:
        super().__init__(answer, json)
        self.text = text
        self.text_json = text_json
