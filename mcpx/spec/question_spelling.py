# -*- test-case-name: tests.server.test_question_spelling -*-
"""
The params of a question an upstream asked, spelled for the revision of the client
it is put to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from mcpx.spec.matrix import field_in
from mcpx.spec.questions import ELICIT, SAMPLE
from mcpx.spec.revision import Revision

#: The params fields of the questions a server asks that some revisions lack, by method.
_QUESTION_FIELDS: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    ELICIT: (
        ("mode", "ElicitRequest.params.mode"),
        ("task", "ElicitRequest.params.task"),
    ),
    SAMPLE: (
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
    if method == ELICIT and not field_in(_MULTI_SELECT, revision):
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
