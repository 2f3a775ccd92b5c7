# -*- test-case-name: tests.interop.test_apps,tests.daemon.test_app_routing -*-
"""
MCP Apps (SEP-1865), the extension C{io.modelcontextprotocol/ui}: its name, and what a
tool and a capability declaration say of it, read once for every floor above.

A tool names the C{ui://} resource its app is rendered from in C{_meta.ui.resourceUri}
(the older spelling C{_meta["ui/resourceUri"]} too), and says who may call it in
C{_meta.ui.visibility}: C{["model"]}, C{["app"]} or both (both when absent).  A peer
declares the extension in C{capabilities.extensions}, a revision that has C{extensions}
(the revision matrix says which), with the MIME types it renders in C{mimeTypes}.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

#: The extension's identifier, its key in C{capabilities.extensions}.
UI_EXTENSION: Final = "io.modelcontextprotocol/ui"
#: The one MIME type of an app's HTML the extension defines.
APP_MIME_TYPE: Final = "text/html;profile=mcp-app"
#: The scheme of an app's resource.
UI_SCHEME: Final = "ui://"
#: The older spelling of C{_meta.ui.resourceUri}, which the official SDK still writes.
LEGACY_RESOURCE_URI_KEY: Final = "ui/resourceUri"


def tool_ui(tool: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A tool's C{_meta.ui}, or C{None} when it has none (or not an object)."""
    meta = tool.get("_meta")
    if type(meta) is not dict:
        return None
    ui = meta.get("ui")
    return ui if type(ui) is dict else None


def resource_uri(tool: Mapping[str, Any]) -> str | None:
    """The C{ui://} resource a tool's app is rendered from, in either spelling, or C{None}."""
    meta = tool.get("_meta")
    if type(meta) is not dict:
        return None
    ui = meta.get("ui")
    uri = ui.get("resourceUri") if type(ui) is dict else None
    if uri is None:
        uri = meta.get(LEGACY_RESOURCE_URI_KEY)
    return uri if isinstance(uri, str) and uri.startswith(UI_SCHEME) else None


def app_only(tool: Mapping[str, Any]) -> bool:
    """
    Whether only an app may call this tool (C{visibility} without C{"model"}): a model
    is never offered it.
    """
    ui = tool_ui(tool)
    visibility = ui.get("visibility") if ui is not None else None
    return type(visibility) is list and "model" not in visibility


def app_may_call(tool: Mapping[str, Any]) -> bool:
    """Whether an app may call this tool: C{visibility} absent, or naming C{"app"}."""
    ui = tool_ui(tool)
    visibility = ui.get("visibility") if ui is not None else None
    return type(visibility) is not list or "app" in visibility


def offers_apps(tools: Iterable[Any]) -> bool:
    """Whether a server listing C{tools} offers an app: one of them names a C{ui://} resource."""
    return any(type(tool) is dict and resource_uri(tool) is not None for tool in tools)


def declared_ui(capabilities: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A peer's declaration of the extension in C{capabilities}, or C{None}."""
    extensions = capabilities.get("extensions")
    if type(extensions) is not dict:
        return None
    declared = extensions.get(UI_EXTENSION)
    return declared if type(declared) is dict else None
