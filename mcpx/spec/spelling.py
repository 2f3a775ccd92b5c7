# -*- test-case-name: tests.spec.test_downgrade -*-
"""
What each revision lacks of the newest result shape, read from the revision matrix
once, at import, into one L{Spelling} per revision for L{mcpx.spec.downgrade}.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from attrs import frozen

from mcpx.spec.feature import Kind
from mcpx.spec.matrix import MATRIX, capability_in, content_type_in, field_in
from mcpx.spec.meta_keys import SERVER_INFO_KEY
from mcpx.spec.revision import ALL_REVISIONS, Revision

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


@frozen
class Spelling:
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


def _spelling(revision: Revision) -> Spelling:
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
    return Spelling(
        revision=revision,
        result_drop=_absent(
            revision,
            [
                ("resultType", "Result.resultType"),
                ("ttlMs", "CacheableResult.ttlMs"),
                ("cacheScope", "CacheableResult.cacheScope"),
            ],
        ),
        meta_drop=_absent(revision, [(SERVER_INFO_KEY, f'_meta["{SERVER_INFO_KEY}"]')]),
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


#: Each revision's spelling, worked out once at import.
SPELLINGS: Final[Mapping[Revision, Spelling]] = {rev: _spelling(rev) for rev in ALL_REVISIONS}
