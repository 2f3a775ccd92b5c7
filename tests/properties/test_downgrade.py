"""Properties of L{mcpx.spec.downgrade.downgrade}: any result, any revision, no harm done."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from mcpx.spec.downgrade import downgrade
from mcpx.spec.revision import ALL_REVISIONS
from tests.properties import bounded, json_objects, json_values, keys

#: Every method with rules of its own, and one without.
METHODS = (
    "initialize",
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/result",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
)

blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "audio", "resource", "resource_link"])},
    optional={
        "text": json_values,
        "data": json_values,
        "mimeType": json_values,
        "uri": json_values,
        "name": json_values,
        "annotations": json_objects,
        "resource": json_objects,
    },
)
items = json_objects | st.dictionaries(keys, json_values | blocks, max_size=6)
lists = st.lists(items | blocks | json_values, max_size=4)

#: Results shaped like MCP results, with any field of any type.
results = (
    st.fixed_dictionaries(
        {},
        optional={
            key: lists | json_values
            for key in (
                "tools",
                "prompts",
                "resources",
                "resourceTemplates",
                "contents",
                "messages",
                "content",
            )
        }
        | {
            "structuredContent": json_values,
            "isError": json_values,
            "capabilities": json_objects,
            "serverInfo": json_objects,
            "resultType": json_values,
            "_meta": json_objects,
        },
    )
    | json_objects
)


class DowngradeProperties(SynchronousTestCase):
    @bounded(150)
    @given(results, st.sampled_from(METHODS))
    def test_never_raises_never_mutates(self, result: dict[str, Any], method: str) -> None:
        """
        For every revision, downgrade() of any JSON-ish result answers a mapping that encodes
        as JSON, and leaves the result exactly as it was.
        """
        before = copy.deepcopy(result)
        for revision in ALL_REVISIONS:
            spelled = downgrade(result, method, revision)
            self.assertEqual(result, before, (method, revision))
            json.dumps(spelled, allow_nan=False)
