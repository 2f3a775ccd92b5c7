"""
The C{_meta} keys MCP reserves for itself, each spelled once: the C{io.modelcontextprotocol/}
prefix is the protocol's, so a peer's own keys never collide with these.

Which revision carries which key is the matrix's business (L{mcpx.spec.matrix}); this
module only names them.
"""

from __future__ import annotations

from typing import Final

#: The prefix of every key the protocol reserves.
RESERVED_PREFIX: Final = "io.modelcontextprotocol/"

#: The revision a 2026-07-28 request is made in (no C{initialize} handshake names it).
PROTOCOL_VERSION_KEY: Final = RESERVED_PREFIX + "protocolVersion"
#: What a 2026-07-28 client can do, sent with each request instead of at C{initialize}.
CLIENT_CAPABILITIES_KEY: Final = RESERVED_PREFIX + "clientCapabilities"
#: Who a 2026-07-28 client is, sent with each request.
CLIENT_INFO_KEY: Final = RESERVED_PREFIX + "clientInfo"
#: Who the server is, in a 2026-07-28 result.
SERVER_INFO_KEY: Final = RESERVED_PREFIX + "serverInfo"
#: The least log level a 2026-07-28 client wants messages of, during its request.
LOG_LEVEL_KEY: Final = RESERVED_PREFIX + "logLevel"
#: The C{subscriptions/listen} stream a 2026-07-28 notification belongs to.
SUBSCRIPTION_ID_KEY: Final = RESERVED_PREFIX + "subscriptionId"
#: The task a message belongs to (2025-11-25 core tasks and the tasks extension).
RELATED_TASK_KEY: Final = RESERVED_PREFIX + "related-task"
