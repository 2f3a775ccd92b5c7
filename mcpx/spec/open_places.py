# -*- test-case-name: tests.spec.test_schemas -*-
"""
Declared data: the places of the official schemas that strict validation leaves
exactly as published, each with its reason.
"""

from __future__ import annotations

from typing import Final

from attrs import frozen


@frozen
class OpenPlace:
    """
    A place that strict mode leaves exactly as published.

    Inline schemas under an open place are not closed at any depth; a C{$ref}
    inside one still leads to the referenced definition, closed as usual, so a
    known key in an open map is type-checked (and, when its value is itself an
    MCP type, checked strictly).

    @ivar property: a property name.  Alone: that property wherever it occurs.
    @ivar definition: a definition name.  Alone: that whole definition.  With
        C{property}: that property of that definition only.
    @ivar reason: why strict mode must not close it.
    """

    reason: str
    property: str | None = None
    definition: str | None = None


#: Everything strict mode keeps open, and why.  The rule they share: a place
#: whose keys are chosen by the sender (a map) or whose value is a JSON Schema
#: document (which may carry any keyword) cannot be closed by a revision.
OPEN_PLACES: Final[tuple[OpenPlace, ...]] = (
    OpenPlace(
        property="_meta",
        reason="metadata map: any sender may attach keys under its own prefix",
    ),
    OpenPlace(property="arguments", reason="tool and prompt arguments are chosen by the tool"),
    OpenPlace(
        property="experimental",
        reason="experimental capabilities are non-standard by definition",
    ),
    OpenPlace(
        property="extensions",
        reason="a map keyed by extension id; each extension defines its own settings",
    ),
    OpenPlace(
        property="structuredContent",
        reason="any JSON value, shaped by the tool's own outputSchema",
    ),
    OpenPlace(
        property="data",
        reason="error data (and log data) is whatever the sender wants to add",
    ),
    OpenPlace(
        property="inputSchema",
        reason="a JSON Schema document: any JSON Schema keyword may appear in it",
    ),
    OpenPlace(
        property="outputSchema",
        reason="a JSON Schema document: any JSON Schema keyword may appear in it",
    ),
    OpenPlace(
        property="requestedSchema",
        reason="a JSON Schema document (a restricted one) describing an elicitation form",
    ),
    OpenPlace(
        definition="Request",
        property="params",
        reason="generic base: the concrete request defines its params",
    ),
    OpenPlace(
        definition="Notification",
        property="params",
        reason="generic base: the concrete notification defines its params",
    ),
    OpenPlace(
        definition="JSONRPCRequest",
        property="params",
        reason="generic JSON-RPC envelope: any request's params travel in it",
    ),
    OpenPlace(
        definition="JSONRPCNotification",
        property="params",
        reason="generic JSON-RPC envelope: any notification's params travel in it",
    ),
    *(
        OpenPlace(
            definition=name,
            reason="the definition of a _meta map: open, though its known keys are checked",
        )
        for name in (
            "MetaObject",
            "RequestMetaObject",
            "ResultMetaObject",
            "NotificationMetaObject",
        )
    ),
    OpenPlace(definition="JSONObject", reason="any JSON object (capability settings and such)"),
    OpenPlace(definition="JSONValue", reason="any JSON value"),
    *(
        OpenPlace(
            definition=name,
            reason="a property schema inside requestedSchema, which is a JSON Schema document",
        )
        for name in (
            "PrimitiveSchemaDefinition",
            "StringSchema",
            "NumberSchema",
            "BooleanSchema",
            "EnumSchema",
            "SingleSelectEnumSchema",
            "MultiSelectEnumSchema",
            "UntitledSingleSelectEnumSchema",
            "TitledSingleSelectEnumSchema",
            "UntitledMultiSelectEnumSchema",
            "TitledMultiSelectEnumSchema",
            "LegacyTitledEnumSchema",
        )
    ),
)

#: The properties open wherever they occur, the definitions open whole, and the
#: (definition, property) pairs open in that definition only.
OPEN_PROPERTIES: Final = frozenset(
    p.property for p in OPEN_PLACES if p.property is not None and p.definition is None
)
OPEN_DEFINITIONS: Final = frozenset(
    p.definition for p in OPEN_PLACES if p.definition is not None and p.property is None
)
OPEN_DEFINITION_PROPERTIES: Final = frozenset(
    (p.definition, p.property)
    for p in OPEN_PLACES
    if p.definition is not None and p.property is not None
)
