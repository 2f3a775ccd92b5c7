# -*- test-case-name: tests.questions.test_caller -*-
"""
The three questions a server may ask its client (elicitation, sampling, roots): their
methods, the capability each needs, and whether a client's declaration lets it be put
one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

ELICIT: Final = "elicitation/create"
SAMPLE: Final = "sampling/createMessage"
LIST_ROOTS: Final = "roots/list"

#: The client capabilities a question needs, by method (the question's kind).
CAPABILITY_FOR: Final[Mapping[str, str]] = {
    ELICIT: "elicitation",
    SAMPLE: "sampling",
    LIST_ROOTS: "roots",
}


def _object(value: object) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def may_ask(capabilities: Mapping[str, Any], method: str, params: Mapping[str, Any]) -> bool:
    """
    Whether a client that declared C{capabilities} may be put this question.

    Declaring one kind is not declaring another; within elicitation the mode counts
    (an empty C{elicitation} object is the form mode of the revisions before modes
    existed), and within sampling tool use and context inclusion need their own
    declarations.
    """
    if method == ELICIT:
        declared = _object(capabilities.get("elicitation"))
        if declared is None:
            return False
        mode = params.get("mode", "form")
        if mode == "url":
            return "url" in declared
        return "form" in declared or not declared
    if method == SAMPLE:
        declared = _object(capabilities.get("sampling"))
        if declared is None:
            return False
        if ("tools" in params or "toolChoice" in params) and "tools" not in declared:
            return False
        include = params.get("includeContext")
        return include not in ("thisServer", "allServers") or "context" in declared
    if method == LIST_ROOTS:
        return _object(capabilities.get("roots")) is not None
    return False
