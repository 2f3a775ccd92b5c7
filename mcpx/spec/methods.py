"""
Methods both sides of mcpx name (the server it is to hosts, the client it is to
upstreams), each spelled once.  The three questions a server may ask are in
L{mcpx.spec.questions}.
"""

from __future__ import annotations

from typing import Final

#: 2026-07-28's request whose answer is a stream of notifications, kept open while wanted.
LISTEN: Final = "subscriptions/listen"
#: The first notification of a listen's stream: what the server grants it.
ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"
#: The notification a 2025-11-25 client hears a task's change of state by.
TASK_STATUS: Final = "notifications/tasks/status"

#: The notifications that a list changed (a server's tools, prompts, resources; a client's roots).
TOOLS_CHANGED: Final = "notifications/tools/list_changed"
PROMPTS_CHANGED: Final = "notifications/prompts/list_changed"
RESOURCES_CHANGED: Final = "notifications/resources/list_changed"
ROOTS_CHANGED: Final = "notifications/roots/list_changed"
#: A client's interest in one resource's updates, and its end.
SUBSCRIBE: Final = "resources/subscribe"
UNSUBSCRIBE: Final = "resources/unsubscribe"
#: A subscribed resource changed.
RESOURCE_UPDATED: Final = "notifications/resources/updated"
