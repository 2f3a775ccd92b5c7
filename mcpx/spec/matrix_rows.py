# -*- test-case-name: tests.spec.test_matrix -*-
"""
The rows of the revision matrix, as declared data: every method, input request,
notification, capability, field, transport mechanism, error code, authorization
rule and behaviour mcpx deals with, each with the revisions that have it and where
the specification says so.  L{mcpx.spec.matrix} answers questions about them.
"""

from __future__ import annotations

from functools import partial
from typing import Required, TypedDict, Unpack

from mcpx.spec.feature import JSONRPC_BATCH, TASKS_EXTENSION, Direction, Feature, Kind
from mcpx.spec.revision import Revision

_V1 = Revision.V2024_11_05
_V2 = Revision.V2025_03_26
_V3 = Revision.V2025_06_18
_V4 = Revision.V2025_11_25
_V5 = Revision.V2026_07_28

_C2S = Direction.CLIENT_TO_SERVER
_S2C = Direction.SERVER_TO_CLIENT
_BOTH = Direction.BOTH


def _doc(rev: Revision, page: str) -> str:
    return f"docs/specification/{rev.value}/{page}.mdx"


def _ts(rev: Revision) -> str:
    return f"schema/{rev.value}/schema.ts"


_TASKS_SPEC = "ext-tasks:specification/2026-07-28/tasks.md"


class _Details(TypedDict, total=False):
    """What a row says besides its kind, name and revisions (L{Feature}'s fields)."""

    note: Required[str]
    spec: Required[str]
    extension: str | None
    deprecated_in: Revision | None
    schema: tuple[str, ...]


#: A request or a notification: a message, sent by C{direction}.
_method = partial(Feature, Kind.METHOD)
_notification = partial(Feature, Kind.NOTIFICATION)


def _plain(
    kind: Kind,
    name: str,
    floor: Revision,
    removed_in: Revision | None,
    **details: Unpack[_Details],
) -> Feature:
    """A row that is not a message, so has no direction: a capability, a field, a rule."""
    return Feature(kind, name, floor, removed_in, None, **details)


#: A capability: its kind says which side declares it.
_capability = _plain
_field = partial(_plain, Kind.FIELD)


_METHODS: tuple[Feature, ...] = (
    _method(
        "initialize",
        _V1,
        _V5,
        _C2S,
        note="legacy handshake; never inside a batch; a dual-era server still accepts it "
        "to switch the connection to a legacy revision",
        spec=_doc(_V1, "basic/lifecycle"),
    ),
    _method(
        "ping",
        _V1,
        _V5,
        _BOTH,
        note="either side may ping until 2026-07-28, which removed it",
        spec=_doc(_V1, "basic/utilities/ping"),
    ),
    _method(
        "server/discover",
        _V5,
        None,
        _C2S,
        note="servers MUST implement it; clients MAY call it; result is cacheable",
        spec=_doc(_V5, "server/discover"),
    ),
    _method(
        "subscriptions/listen",
        _V5,
        None,
        _C2S,
        note="long-lived stream for list_changed and resource updates",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _method(
        "resources/list",
        _V1,
        None,
        _C2S,
        note="paginated; 2026-07-28 adds ttlMs/cacheScope",
        spec=_doc(_V1, "server/resources"),
    ),
    _method(
        "resources/templates/list",
        _V1,
        None,
        _C2S,
        note="paginated; 2026-07-28 adds ttlMs/cacheScope",
        spec=_doc(_V1, "server/resources"),
    ),
    _method(
        "resources/read",
        _V1,
        None,
        _C2S,
        note="2026-07-28: cacheable, may answer input_required, not found is -32602",
        spec=_doc(_V1, "server/resources"),
    ),
    _method(
        "resources/subscribe",
        _V1,
        _V5,
        _C2S,
        note="replaced by subscriptions/listen resourceSubscriptions",
        spec=_doc(_V5, "server/resources"),
    ),
    _method(
        "resources/unsubscribe",
        _V1,
        _V5,
        _C2S,
        note="replaced by closing the subscriptions/listen stream",
        spec=_doc(_V5, "server/resources"),
    ),
    _method(
        "prompts/list",
        _V1,
        None,
        _C2S,
        note="paginated; 2026-07-28 adds ttlMs/cacheScope",
        spec=_doc(_V1, "server/prompts"),
    ),
    _method(
        "prompts/get",
        _V1,
        None,
        _C2S,
        note="2026-07-28: may answer input_required",
        spec=_doc(_V1, "server/prompts"),
    ),
    _method(
        "tools/list",
        _V1,
        None,
        _C2S,
        note="paginated; 2026-07-28 adds ttlMs/cacheScope and forbids per-connection variation",
        spec=_doc(_V1, "server/tools"),
    ),
    _method(
        "tools/call",
        _V1,
        None,
        _C2S,
        note="2025-11-25: params.task; 2026-07-28: may answer input_required, "
        "and resultType task under the tasks extension",
        spec=_doc(_V1, "server/tools"),
    ),
    _method(
        "logging/setLevel",
        _V1,
        _V5,
        _C2S,
        note="2026-07-28 asks per request through _meta io.modelcontextprotocol/logLevel",
        spec=_doc(_V5, "server/utilities/logging"),
    ),
    _method(
        "completion/complete",
        _V1,
        None,
        _C2S,
        note="2025-06-18 adds params.context; never answers input_required",
        spec=_doc(_V1, "server/utilities/completion"),
    ),
    _method(
        "sampling/createMessage",
        _V1,
        _V5,
        _S2C,
        note="2026-07-28 keeps it only as an inputRequests entry",
        spec=_doc(_V1, "client/sampling"),
    ),
    _method(
        "roots/list",
        _V1,
        _V5,
        _S2C,
        note="2026-07-28 keeps it only as an inputRequests entry",
        spec=_doc(_V1, "client/roots"),
    ),
    _method(
        "elicitation/create",
        _V3,
        _V5,
        _S2C,
        note="form mode 2025-06-18, url mode 2025-11-25; "
        "2026-07-28 keeps it only as an inputRequests entry",
        spec=_doc(_V3, "client/elicitation"),
    ),
    _method(
        "tasks/get",
        _V4,
        _V5,
        _BOTH,
        note="core tasks (experimental); 2026-07-28 moves it to the tasks extension",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _method(
        "tasks/result",
        _V4,
        _V5,
        _BOTH,
        note="core tasks; the 2026-07-28 tasks extension answers -32601",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _method(
        "tasks/list",
        _V4,
        _V5,
        _BOTH,
        note="core tasks; gone in 2026-07-28",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _method(
        "tasks/cancel",
        _V4,
        _V5,
        _BOTH,
        note="core tasks, returns the Task; 2026-07-28 moves it to the tasks extension",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _method(
        "tasks/get",
        _V5,
        None,
        _C2S,
        note="tasks extension: result is the DetailedTask with resultType complete",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
    _method(
        "tasks/update",
        _V5,
        None,
        _C2S,
        note="tasks extension: answers a task's inputRequests; empty acknowledgement",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
    _method(
        "tasks/cancel",
        _V5,
        None,
        _C2S,
        note="tasks extension: cooperative, empty acknowledgement",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
)

_INPUT_REQUESTS: tuple[Feature, ...] = (
    Feature(
        Kind.INPUT_REQUEST,
        "sampling/createMessage",
        _V5,
        None,
        _S2C,
        "bare {method, params} in InputRequiredResult.inputRequests; no _meta or task",
        _doc(_V5, "client/sampling"),
        deprecated_in=_V5,
    ),
    Feature(
        Kind.INPUT_REQUEST,
        "roots/list",
        _V5,
        None,
        _S2C,
        "bare {method, params} in InputRequiredResult.inputRequests",
        _doc(_V5, "client/roots"),
        deprecated_in=_V5,
    ),
    Feature(
        Kind.INPUT_REQUEST,
        "elicitation/create",
        _V5,
        None,
        _S2C,
        "form and url modes, without elicitationId",
        _doc(_V5, "client/elicitation"),
    ),
)

_NOTIFICATIONS: tuple[Feature, ...] = (
    _notification(
        "notifications/initialized",
        _V1,
        _V5,
        _C2S,
        note="ends the legacy handshake",
        spec=_doc(_V1, "basic/lifecycle"),
    ),
    _notification(
        "notifications/cancelled",
        _V1,
        None,
        _BOTH,
        note="never for tasks (2025-11-25 on); 2026-07-28: clients send it on stdio only "
        "(HTTP closes the stream), servers only to end a subscriptions/listen stream",
        spec=_doc(_V5, "basic/patterns/cancellation"),
    ),
    _notification(
        "notifications/progress",
        _V1,
        _V5,
        _C2S,
        note="a client reporting progress on a server's request; 2026-07-28 has no server requests",
        spec=_doc(_V5, "basic/patterns/progress"),
    ),
    _notification(
        "notifications/progress",
        _V1,
        None,
        _S2C,
        note="message added in 2025-03-26; 2026-07-28 sends it on the request's own stream",
        spec=_doc(_V1, "basic/utilities/progress"),
    ),
    _notification(
        "notifications/message",
        _V1,
        None,
        _S2C,
        note="2026-07-28: only for a request whose _meta set a logLevel, on its stream",
        spec=_doc(_V5, "server/utilities/logging"),
        deprecated_in=_V5,
    ),
    _notification(
        "notifications/resources/list_changed",
        _V1,
        None,
        _S2C,
        note="2026-07-28: only on a subscriptions/listen stream (resourcesListChanged)",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _notification(
        "notifications/resources/updated",
        _V1,
        None,
        _S2C,
        note="after resources/subscribe; 2026-07-28: on a listen stream (resourceSubscriptions)",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _notification(
        "notifications/prompts/list_changed",
        _V1,
        None,
        _S2C,
        note="2026-07-28: only on a subscriptions/listen stream (promptsListChanged)",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _notification(
        "notifications/tools/list_changed",
        _V1,
        None,
        _S2C,
        note="2026-07-28: only on a subscriptions/listen stream (toolsListChanged)",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _notification(
        "notifications/roots/list_changed",
        _V1,
        _V5,
        _C2S,
        note="needs the roots.listChanged client capability",
        spec=_doc(_V1, "client/roots"),
    ),
    _notification(
        "notifications/elicitation/complete",
        _V4,
        _V5,
        _S2C,
        note="ends a url-mode elicitation (elicitationId)",
        spec=_doc(_V4, "client/elicitation"),
    ),
    _notification(
        "notifications/tasks/status",
        _V4,
        _V5,
        _BOTH,
        note="core tasks; the extension renames it notifications/tasks",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _notification(
        "notifications/subscriptions/acknowledged",
        _V5,
        None,
        _S2C,
        note="first message on a subscriptions/listen stream: the honoured filter",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
    ),
    _notification(
        "notifications/tasks",
        _V5,
        None,
        _S2C,
        note="tasks extension: full DetailedTask, only via subscriptions/listen taskIds",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
)

_CC = Kind.CLIENT_CAPABILITY
_SC = Kind.SERVER_CAPABILITY
_LIFECYCLE = _doc(_V1, "basic/lifecycle")

_CAPABILITIES: tuple[Feature, ...] = (
    _capability(_CC, "experimental", _V1, None, note="free-form", spec=_LIFECYCLE),
    _capability(
        _CC,
        "roots",
        _V1,
        None,
        note="2026-07-28: roots{} only",
        spec=_doc(_V1, "client/roots"),
        deprecated_in=_V5,
    ),
    _capability(
        _CC,
        "roots.listChanged",
        _V1,
        _V5,
        note="promise to send notifications/roots/list_changed",
        spec=_doc(_V1, "client/roots"),
    ),
    _capability(
        _CC,
        "sampling",
        _V1,
        None,
        note="2026-07-28: answered as an input request",
        spec=_doc(_V1, "client/sampling"),
        deprecated_in=_V5,
    ),
    _capability(
        _CC,
        "sampling.context",
        _V4,
        None,
        note="allows includeContext thisServer/allServers",
        spec=_doc(_V4, "client/sampling"),
    ),
    _capability(
        _CC,
        "sampling.tools",
        _V4,
        None,
        note="allows tools/toolChoice in sampling",
        spec=_doc(_V4, "client/sampling"),
    ),
    _capability(
        _CC,
        "elicitation",
        _V3,
        None,
        note="{} means form mode only",
        spec=_doc(_V3, "client/elicitation"),
    ),
    _capability(
        _CC, "elicitation.form", _V4, None, note="form mode", spec=_doc(_V4, "client/elicitation")
    ),
    _capability(
        _CC, "elicitation.url", _V4, None, note="url mode", spec=_doc(_V4, "client/elicitation")
    ),
    _capability(
        _CC,
        "tasks",
        _V4,
        _V5,
        note="client-hosted core tasks (sampling, elicitation)",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _capability(
        _CC, "tasks.list", _V4, _V5, note="core tasks", spec=_doc(_V4, "basic/utilities/tasks")
    ),
    _capability(
        _CC, "tasks.cancel", _V4, _V5, note="core tasks", spec=_doc(_V4, "basic/utilities/tasks")
    ),
    _capability(
        _CC,
        "tasks.requests",
        _V4,
        _V5,
        note="sampling.createMessage, elicitation.create",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _capability(
        _CC,
        "extensions",
        _V5,
        None,
        note="per-request extension negotiation",
        spec=_doc(_V5, "basic/versioning"),
    ),
    _capability(
        _CC,
        f"extensions.{TASKS_EXTENSION}",
        _V5,
        None,
        note="the client accepts task results on this request",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
    _capability(_SC, "experimental", _V1, None, note="free-form", spec=_LIFECYCLE),
    _capability(
        _SC,
        "logging",
        _V1,
        None,
        note="notifications/message",
        spec=_doc(_V1, "server/utilities/logging"),
        deprecated_in=_V5,
    ),
    _capability(
        _SC,
        "completions",
        _V2,
        None,
        note="completion/complete",
        spec=_doc(_V2, "server/utilities/completion"),
    ),
    _capability(_SC, "prompts", _V1, None, note="prompts/*", spec=_doc(_V1, "server/prompts")),
    _capability(
        _SC,
        "prompts.listChanged",
        _V1,
        None,
        note="notifications/prompts/list_changed",
        spec=_doc(_V1, "server/prompts"),
    ),
    _capability(
        _SC, "resources", _V1, None, note="resources/*", spec=_doc(_V1, "server/resources")
    ),
    _capability(
        _SC,
        "resources.subscribe",
        _V1,
        None,
        note="2026-07-28: honours resourceSubscriptions on subscriptions/listen",
        spec=_doc(_V5, "server/resources"),
    ),
    _capability(
        _SC,
        "resources.listChanged",
        _V1,
        None,
        note="notifications/resources/list_changed",
        spec=_doc(_V1, "server/resources"),
    ),
    _capability(_SC, "tools", _V1, None, note="tools/*", spec=_doc(_V1, "server/tools")),
    _capability(
        _SC,
        "tools.listChanged",
        _V1,
        None,
        note="notifications/tools/list_changed",
        spec=_doc(_V1, "server/tools"),
    ),
    _capability(
        _SC,
        "tasks",
        _V4,
        _V5,
        note="server-hosted core tasks (tools/call)",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _capability(
        _SC, "tasks.list", _V4, _V5, note="core tasks", spec=_doc(_V4, "basic/utilities/tasks")
    ),
    _capability(
        _SC, "tasks.cancel", _V4, _V5, note="core tasks", spec=_doc(_V4, "basic/utilities/tasks")
    ),
    _capability(
        _SC,
        "tasks.requests",
        _V4,
        _V5,
        note="tools.call",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
    _capability(
        _SC,
        "extensions",
        _V5,
        None,
        note="advertised in DiscoverResult.capabilities",
        spec=_doc(_V5, "basic/versioning"),
    ),
    _capability(
        _SC,
        f"extensions.{TASKS_EXTENSION}",
        _V5,
        None,
        note="the server may answer tools/call with a task",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
)

_FIELDS: tuple[Feature, ...] = (
    _field(
        "Result._meta",
        _V1,
        None,
        note="2026-07-28: typed ResultMetaObject",
        spec=_ts(_V1),
        schema=("Result", "_meta"),
    ),
    _field(
        "Result.resultType",
        _V5,
        None,
        note="required on every result; complete | input_required | extension values; "
        "missing means complete",
        spec=_doc(_V5, "basic/index"),
        schema=("Result", "resultType"),
    ),
    _field(
        "InitializeResult.instructions",
        _V1,
        _V5,
        note="moves to DiscoverResult.instructions",
        spec=_ts(_V1),
        schema=("InitializeResult", "instructions"),
    ),
    _field(
        "InitializeResult.serverInfo",
        _V1,
        _V5,
        note="server identity moves to result _meta io.modelcontextprotocol/serverInfo",
        spec=_ts(_V1),
        schema=("InitializeResult", "serverInfo"),
    ),
    _field(
        "DiscoverResult.supportedVersions",
        _V5,
        None,
        note="what a modern server speaks",
        spec=_doc(_V5, "server/discover"),
        schema=("DiscoverResult", "supportedVersions"),
    ),
    _field(
        "CacheableResult.ttlMs",
        _V5,
        None,
        note="required on discover, list and resources/read results; absent means 0",
        spec=_doc(_V5, "server/utilities/caching"),
        schema=("CacheableResult", "ttlMs"),
    ),
    _field(
        "CacheableResult.cacheScope",
        _V5,
        None,
        note="public | private; same on every page of a list",
        spec=_doc(_V5, "server/utilities/caching"),
        schema=("CacheableResult", "cacheScope"),
    ),
    _field(
        "InputRequiredResult.inputRequests",
        _V5,
        None,
        note="MRTR: only tools/call, resources/read and prompts/get may answer it",
        spec=_doc(_V5, "basic/patterns/mrtr"),
        schema=("InputRequiredResult", "inputRequests"),
    ),
    _field(
        "InputRequiredResult.requestState",
        _V5,
        None,
        note="MRTR: opaque, echoed exactly on the retry",
        spec=_doc(_V5, "basic/patterns/mrtr"),
        schema=("InputRequiredResult", "requestState"),
    ),
    _field(
        "inputResponses",
        _V5,
        None,
        note="MRTR retry params (tools/call, prompts/get, resources/read)",
        spec=_doc(_V5, "basic/patterns/mrtr"),
        schema=("CallToolRequest", "params", "inputResponses"),
    ),
    _field(
        "CallToolResult.isError",
        _V1,
        None,
        note="tool failure reported in the result",
        spec=_doc(_V1, "server/tools"),
        schema=("CallToolResult", "isError"),
    ),
    _field(
        "CallToolResult.structuredContent",
        _V3,
        None,
        note="a JSON object until 2025-11-25; any JSON value in 2026-07-28",
        spec=_doc(_V3, "server/tools"),
        schema=("CallToolResult", "structuredContent"),
    ),
    _field(
        "Tool.outputSchema",
        _V3,
        None,
        note="object schema until 2025-11-25; any 2020-12 schema in 2026-07-28",
        spec=_doc(_V3, "server/tools"),
        schema=("Tool", "outputSchema"),
    ),
    _field(
        "Tool.title",
        _V3,
        None,
        note="BaseMetadata.title",
        spec=_doc(_V3, "changelog"),
        schema=("Tool", "title"),
    ),
    _field(
        "Tool.icons",
        _V4,
        None,
        note="Icon list",
        spec=_doc(_V4, "basic/index"),
        schema=("Tool", "icons"),
    ),
    _field(
        "Tool.annotations",
        _V2,
        None,
        note="ToolAnnotations: title and the read-only/destructive/idempotent/open-world hints",
        spec=_doc(_V2, "changelog"),
        schema=("Tool", "annotations"),
    ),
    _field(
        "Tool.execution",
        _V4,
        _V5,
        note="execution.taskSupport forbidden | optional | required",
        spec=_doc(_V4, "server/tools"),
        schema=("Tool", "execution"),
    ),
    _field(
        "Tool._meta",
        _V3,
        None,
        note="widespread _meta",
        spec=_doc(_V3, "changelog"),
        schema=("Tool", "_meta"),
    ),
    _field(
        "Prompt.title",
        _V3,
        None,
        note="BaseMetadata.title",
        spec=_doc(_V3, "changelog"),
        schema=("Prompt", "title"),
    ),
    _field(
        "Resource.title",
        _V3,
        None,
        note="BaseMetadata.title",
        spec=_doc(_V3, "changelog"),
        schema=("Resource", "title"),
    ),
    _field(
        "ResourceTemplate.title",
        _V3,
        None,
        note="BaseMetadata.title",
        spec=_doc(_V3, "changelog"),
        schema=("ResourceTemplate", "title"),
    ),
    _field(
        "Prompt.icons",
        _V4,
        None,
        note="Icon list",
        spec=_doc(_V4, "basic/index"),
        schema=("Prompt", "icons"),
    ),
    _field(
        "Resource.icons",
        _V4,
        None,
        note="Icon list",
        spec=_doc(_V4, "basic/index"),
        schema=("Resource", "icons"),
    ),
    _field(
        "ResourceTemplate.icons",
        _V4,
        None,
        note="Icon list",
        spec=_doc(_V4, "basic/index"),
        schema=("ResourceTemplate", "icons"),
    ),
    _field(
        "ResourceLink.icons",
        _V4,
        None,
        note="Icon list",
        spec=_doc(_V4, "basic/index"),
        schema=("ResourceLink", "icons"),
    ),
    _field(
        "Implementation.title",
        _V3,
        None,
        note="BaseMetadata.title",
        spec=_doc(_V3, "changelog"),
        schema=("Implementation", "title"),
    ),
    _field(
        "Implementation.description",
        _V4,
        None,
        note="free text about the client or server",
        spec=_ts(_V4),
        schema=("Implementation", "description"),
    ),
    _field(
        "Implementation.icons",
        _V4,
        None,
        note="Icon list",
        spec=_ts(_V4),
        schema=("Implementation", "icons"),
    ),
    _field(
        "Implementation.websiteUrl",
        _V4,
        None,
        note="home page of the client or server",
        spec=_ts(_V4),
        schema=("Implementation", "websiteUrl"),
    ),
    _field(
        "annotations",
        _V1,
        None,
        note="audience/priority on content and resources: the Annotated mixin in 2024-11-05, "
        "the Annotations type from 2025-03-26",
        spec=_ts(_V1),
        schema=("TextContent", "annotations"),
    ),
    _field(
        "Annotations.lastModified",
        _V3,
        None,
        note="ISO 8601 timestamp",
        spec=_doc(_V3, "changelog"),
        schema=("TextContent", "annotations", "lastModified"),
    ),
    _field(
        "content._meta",
        _V3,
        None,
        note="_meta on content blocks; 2026-07-28: typed MetaObject",
        spec=_doc(_V3, "changelog"),
        schema=("TextContent", "_meta"),
    ),
    _field(
        "content:text", _V1, None, note="TextContent", spec=_ts(_V1), schema=("TextContent", "type")
    ),
    _field(
        "content:image",
        _V1,
        None,
        note="ImageContent",
        spec=_ts(_V1),
        schema=("ImageContent", "type"),
    ),
    _field(
        "content:resource",
        _V1,
        None,
        note="EmbeddedResource",
        spec=_ts(_V1),
        schema=("EmbeddedResource", "type"),
    ),
    _field(
        "content:audio",
        _V2,
        None,
        note="AudioContent",
        spec=_ts(_V2),
        schema=("AudioContent", "type"),
    ),
    _field(
        "content:resource_link",
        _V3,
        None,
        note="ResourceLink, part of the ContentBlock union",
        spec=_doc(_V3, "server/tools"),
        schema=("ResourceLink", "type"),
    ),
    _field(
        "content:tool_use",
        _V4,
        None,
        note="sampling only",
        spec=_doc(_V4, "client/sampling"),
        schema=("ToolUseContent", "type"),
    ),
    _field(
        "content:tool_result",
        _V4,
        None,
        note="sampling only; a message holding tool results holds nothing else",
        spec=_doc(_V4, "client/sampling"),
        schema=("ToolResultContent", "type"),
    ),
    _field(
        "ProgressNotification.message",
        _V2,
        None,
        note="human-readable progress text",
        spec=_doc(_V2, "changelog"),
        schema=("ProgressNotification", "params", "message"),
    ),
    _field(
        "CompleteRequest.params.context",
        _V3,
        None,
        note="already-resolved arguments",
        spec=_doc(_V3, "server/utilities/completion"),
        schema=("CompleteRequest", "params", "context"),
    ),
    _field(
        "ElicitRequest.params.mode",
        _V4,
        None,
        note="form | url; absent means form",
        spec=_doc(_V4, "client/elicitation"),
        schema=("ElicitRequest", "params", "mode"),
    ),
    _field(
        "ElicitRequestURLParams.elicitationId",
        _V4,
        _V5,
        note="correlates notifications/elicitation/complete; 2026-07-28 correlates by requestState",
        spec=_doc(_V5, "client/elicitation"),
        schema=("ElicitRequestURLParams", "elicitationId"),
    ),
    _field(
        "elicitation enums: titled and multi-select",
        _V4,
        None,
        note="SEP-1330; LegacyTitledEnumSchema keeps enumNames",
        spec=_doc(_V4, "client/elicitation"),
        schema=("TitledMultiSelectEnumSchema",),
    ),
    _field(
        "elicitation defaults",
        _V4,
        None,
        note="SEP-1034: every primitive may carry a default",
        spec=_doc(_V4, "client/elicitation"),
        schema=("StringSchema", "default"),
    ),
    _field(
        "ElicitResult.content string[]",
        _V4,
        None,
        note="multi-select answers",
        spec=_ts(_V4),
    ),
    _field(
        "CreateMessageRequest.params.tools",
        _V4,
        None,
        note="gated on sampling.tools",
        spec=_doc(_V4, "client/sampling"),
        schema=("CreateMessageRequest", "params", "tools"),
    ),
    _field(
        "CreateMessageRequest.params.toolChoice",
        _V4,
        None,
        note="auto | required | none",
        spec=_doc(_V4, "client/sampling"),
        schema=("CreateMessageRequest", "params", "toolChoice"),
    ),
    _field(
        "includeContext thisServer/allServers",
        _V1,
        None,
        note="soft-deprecated in 2025-11-25 unless sampling.context is declared",
        spec=_doc(_V5, "deprecated"),
        schema=("CreateMessageRequest", "params", "includeContext"),
        deprecated_in=_V4,
    ),
    _field(
        "CreateMessageResult.content array",
        _V4,
        None,
        note="a single block or an array",
        spec=_ts(_V4),
    ),
    _field(
        "CallToolRequest.params.task",
        _V4,
        _V5,
        note="task augmentation; ignored under the 2026-07-28 extension",
        spec=_doc(_V4, "basic/utilities/tasks"),
        schema=("CallToolRequest", "params", "task"),
    ),
    _field(
        "CreateMessageRequest.params.task",
        _V4,
        _V5,
        note="client-hosted task augmentation",
        spec=_doc(_V4, "basic/utilities/tasks"),
        schema=("CreateMessageRequest", "params", "task"),
    ),
    _field(
        "ElicitRequest.params.task",
        _V4,
        _V5,
        note="client-hosted task augmentation",
        spec=_doc(_V4, "basic/utilities/tasks"),
        schema=("ElicitRequest", "params", "task"),
    ),
    _field(
        "CreateTaskResult.task",
        _V4,
        _V5,
        note="{task: Task}; the extension returns a flat Result & Task instead",
        spec=_doc(_V4, "basic/utilities/tasks"),
        schema=("CreateTaskResult", "task"),
    ),
    _field(
        "Task.ttl",
        _V4,
        _V5,
        note="the extension renames it ttlMs (and pollInterval to pollIntervalMs)",
        spec=_ts(_V4),
        schema=("Task", "ttl"),
    ),
    _field(
        '_meta["io.modelcontextprotocol/related-task"]',
        _V4,
        _V5,
        note="on tasks/result answers and task-related messages",
        spec=_doc(_V4, "basic/utilities/tasks"),
        schema=("RelatedTaskMetadata",),
    ),
    _field(
        '_meta["io.modelcontextprotocol/protocolVersion"]',
        _V5,
        None,
        note="required on every request",
        spec=_doc(_V5, "basic/index"),
        schema=("RequestMetaObject", "io.modelcontextprotocol/protocolVersion"),
    ),
    _field(
        '_meta["io.modelcontextprotocol/clientCapabilities"]',
        _V5,
        None,
        note="required on every request; {} declares nothing",
        spec=_doc(_V5, "basic/index"),
        schema=("RequestMetaObject", "io.modelcontextprotocol/clientCapabilities"),
    ),
    _field(
        '_meta["io.modelcontextprotocol/clientInfo"]',
        _V5,
        None,
        note="optional, SHOULD be sent",
        spec=_doc(_V5, "basic/index"),
        schema=("RequestMetaObject", "io.modelcontextprotocol/clientInfo"),
    ),
    _field(
        '_meta["io.modelcontextprotocol/logLevel"]',
        _V5,
        None,
        note="replaces logging/setLevel; no log notifications without it",
        spec=_doc(_V5, "server/utilities/logging"),
        schema=("RequestMetaObject", "io.modelcontextprotocol/logLevel"),
        deprecated_in=_V5,
    ),
    _field(
        '_meta["io.modelcontextprotocol/serverInfo"]',
        _V5,
        None,
        note="server identity on every result (SHOULD)",
        spec=_doc(_V5, "basic/index"),
        schema=("ResultMetaObject", "io.modelcontextprotocol/serverInfo"),
    ),
    _field(
        '_meta["io.modelcontextprotocol/subscriptionId"]',
        _V5,
        None,
        note="required on everything sent on a subscriptions/listen stream",
        spec=_doc(_V5, "basic/patterns/subscriptions"),
        schema=("NotificationMetaObject", "io.modelcontextprotocol/subscriptionId"),
    ),
    _field(
        "_meta traceparent/tracestate/baggage",
        _V5,
        None,
        note="OpenTelemetry keys, exempt from the prefix rule (SEP-414)",
        spec=_doc(_V5, "basic/index"),
    ),
    _field(
        "SubscriptionFilter.taskIds",
        _V5,
        None,
        note="tasks extension: ask for notifications/tasks",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
    _field(
        "Result.resultType=task",
        _V5,
        None,
        note="tasks extension: tools/call answered with a flat CreateTaskResult",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
    _field(
        "Task.ttlMs",
        _V5,
        None,
        note="tasks extension: number or null (not the cache ttlMs)",
        spec=_TASKS_SPEC,
        extension=TASKS_EXTENSION,
    ),
)

_TR = Kind.TRANSPORT
_HTTP_2025 = _doc(_V2, "basic/transports")
_HTTP_2026 = _doc(_V5, "basic/transports/streamable-http")

_TRANSPORTS: tuple[Feature, ...] = (
    _plain(
        _TR,
        "stdio",
        _V1,
        None,
        note="newline-delimited messages",
        spec=_doc(_V1, "basic/transports"),
    ),
    _plain(
        _TR,
        "http+sse",
        _V1,
        None,
        note="GET SSE endpoint plus the POST URI from its endpoint event",
        spec=_doc(_V5, "deprecated"),
        deprecated_in=_V2,
    ),
    _plain(
        _TR,
        "streamable http",
        _V2,
        None,
        note="one endpoint; 2026-07-28: POST only",
        spec=_HTTP_2025,
    ),
    _plain(
        _TR,
        "streamable http GET stream",
        _V2,
        _V5,
        note="server-initiated stream; 2026-07-28 answers GET with 405",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "streamable http DELETE",
        _V2,
        _V5,
        note="ends a session; 2026-07-28 answers DELETE with 405",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "Mcp-Session-Id",
        _V2,
        _V5,
        note="minted at initialize; spelled MCP-Session-Id in 2025-11-25; 2026-07-28 ignores it",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "Last-Event-ID",
        _V2,
        _V5,
        note="SSE resumption by GET; 2026-07-28 ignores it",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "sse polling",
        _V4,
        _V5,
        note="priming event and retry (SEP-1699); gone with resumption (inferred, not stated)",
        spec=_doc(_V4, "basic/transports"),
    ),
    _plain(
        _TR,
        JSONRPC_BATCH,
        _V2,
        _V3,
        note="MAY send, MUST accept; never with initialize",
        spec=_doc(_V2, "basic/index"),
    ),
    _plain(
        _TR,
        "MCP-Protocol-Version",
        _V3,
        None,
        note="2025-03-26 sent it only during auth discovery; "
        "2026-07-28: every POST, must match _meta (else -32020)",
        spec=_doc(_V3, "basic/transports"),
    ),
    _plain(
        _TR,
        "Mcp-Method",
        _V5,
        None,
        note="required on every request POST",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "Mcp-Name",
        _V5,
        None,
        note="tools/call, prompts/get (params.name), resources/read (params.uri), "
        "extension task methods (params.taskId)",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "Mcp-Param-*",
        _V5,
        None,
        note="from x-mcp-header tool arguments; =?base64?...?= for unsafe values",
        spec=_HTTP_2026,
    ),
    _plain(
        _TR,
        "origin validation",
        _V1,
        None,
        note="MUST validate Origin",
        spec=_doc(_V1, "basic/transports"),
    ),
    _plain(
        _TR,
        "origin 403",
        _V4,
        None,
        note="an invalid Origin gets 403",
        spec=_doc(_V4, "basic/transports"),
    ),
)

_EC = Kind.ERROR_CODE
_BASIC_2026 = _doc(_V5, "basic/index")

_ERROR_CODES: tuple[Feature, ...] = (
    _plain(_EC, "-32700", _V1, None, note="parse error", spec=_BASIC_2026),
    _plain(_EC, "-32600", _V1, None, note="invalid request", spec=_BASIC_2026),
    _plain(
        _EC,
        "-32601",
        _V1,
        None,
        note="method not found, or behind a capability that was not advertised",
        spec=_BASIC_2026,
    ),
    _plain(
        _EC,
        "-32602",
        _V1,
        None,
        note="invalid params; 2026-07-28 also for resource not found",
        spec=_BASIC_2026,
    ),
    _plain(_EC, "-32603", _V1, None, note="internal error", spec=_BASIC_2026),
    _plain(
        _EC,
        "-32002",
        _V1,
        _V5,
        note="resource not found; modern peers MUST NOT emit it but SHOULD accept it",
        spec=_doc(_V5, "server/resources"),
    ),
    _plain(
        _EC,
        "-1",
        _V1,
        _V5,
        note="user rejected sampling (the spec's example)",
        spec=_doc(_V1, "client/sampling"),
    ),
    _plain(
        _EC,
        "-32042",
        _V4,
        _V5,
        note="URLElicitationRequiredError, data.elicitations",
        spec=_doc(_V4, "client/elicitation"),
    ),
    _plain(
        _EC,
        "-32020",
        _V5,
        None,
        note="HeaderMismatch (HTTP 400)",
        spec=_HTTP_2026,
    ),
    _plain(
        _EC,
        "-32021",
        _V5,
        None,
        note="MissingRequiredClientCapability (HTTP 400), data.requiredCapabilities",
        spec=_BASIC_2026,
    ),
    _plain(
        _EC,
        "-32022",
        _V5,
        None,
        note="UnsupportedProtocolVersion (HTTP 400), data{supported, requested}",
        spec=_doc(_V5, "basic/versioning"),
    ),
)

_AU = Kind.AUTHORIZATION

_AUTHORIZATION: tuple[Feature, ...] = (
    _plain(
        _AU,
        "oauth 2.1",
        _V2,
        None,
        note="HTTP transports; stdio takes credentials from the environment",
        spec=_doc(_V2, "basic/authorization"),
    ),
    _plain(
        _AU,
        "default authorization endpoints",
        _V2,
        _V3,
        note="/authorize, /token, /register when metadata is missing",
        spec=_doc(_V2, "basic/authorization"),
    ),
    _plain(
        _AU,
        "dynamic client registration",
        _V2,
        None,
        note="RFC 7591",
        spec=_doc(_V5, "deprecated"),
        deprecated_in=_V5,
    ),
    _plain(
        _AU,
        "protected resource metadata",
        _V3,
        None,
        note="RFC 9728; WWW-Authenticate on 401",
        spec=_doc(_V3, "basic/authorization"),
    ),
    _plain(
        _AU,
        "resource indicator",
        _V3,
        None,
        note="RFC 8707 resource parameter; audience-checked tokens",
        spec=_doc(_V3, "basic/authorization"),
    ),
    _plain(
        _AU,
        "oidc discovery",
        _V4,
        None,
        note="OpenID Connect Discovery alongside RFC 8414",
        spec=_doc(_V4, "basic/authorization"),
    ),
    _plain(
        _AU,
        "client id metadata documents",
        _V4,
        None,
        note="CIMD, preferred over DCR",
        spec=_doc(_V4, "basic/authorization"),
    ),
    _plain(
        _AU,
        "step-up scope",
        _V4,
        None,
        note="403 insufficient_scope",
        spec=_doc(_V4, "basic/authorization"),
    ),
    _plain(
        _AU,
        "issuer validation",
        _V5,
        None,
        note="RFC 9207 iss; application_type on DCR; credentials keyed by issuer",
        spec="docs/specification/2026-07-28/basic/authorization/index.mdx",
    ),
)

_BE = Kind.BEHAVIOUR

_BEHAVIOURS: tuple[Feature, ...] = (
    _plain(
        _BE,
        "server-to-client requests",
        _V1,
        _V5,
        note="replaced by input_required results (MRTR)",
        spec=_doc(_V5, "basic/patterns/mrtr"),
    ),
    _plain(
        _BE,
        "per-request version and capabilities",
        _V5,
        None,
        note="no handshake; every request restates its version and capabilities in _meta",
        spec=_BASIC_2026,
    ),
    _plain(
        _BE,
        "multi round-trip requests",
        _V5,
        None,
        note="input_required, inputRequests, inputResponses, requestState",
        spec=_doc(_V5, "basic/patterns/mrtr"),
    ),
    _plain(
        _BE,
        "json schema 2020-12 default dialect",
        _V4,
        None,
        note="when $schema is absent",
        spec=_doc(_V4, "basic/index"),
    ),
    _plain(
        _BE,
        "client-hosted tasks",
        _V4,
        _V5,
        note="sampling and elicitation as tasks; the extension hosts tasks on servers only",
        spec=_doc(_V4, "basic/utilities/tasks"),
    ),
)

#: Every row, in the order written above.
FEATURES: tuple[Feature, ...] = (
    _METHODS
    + _INPUT_REQUESTS
    + _NOTIFICATIONS
    + _CAPABILITIES
    + _FIELDS
    + _TRANSPORTS
    + _ERROR_CODES
    + _AUTHORIZATION
    + _BEHAVIOURS
)
