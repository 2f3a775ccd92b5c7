"""
A stdio MCP server with many tools, for the benchmarks: C{python many_tools_server.py N [PREFIX]}.

Standard library only, so that a hundred of them start quickly and hold little.  It offers
N tools (C{PREFIXtool_0} ... C{PREFIXtool_<N-1>}, each with a small input schema), answers
C{initialize} with the revision it is asked for when it knows it, C{tools/list} with all
N at once, C{tools/call} with the C{text} argument echoed, and C{ping}.
"""

import json
import sys

KNOWN = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")


def tools(count: int, prefix: str) -> list[dict[str, object]]:
    return [
        {
            "name": f"{prefix}tool_{i}",
            "description": f"Tool number {i} of {count}: echoes its text argument.",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "What to echo."}},
                "required": ["text"],
            },
        }
        for i in range(count)
    ]


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    listed = tools(count, sys.argv[2] if len(sys.argv) > 2 else "")
    out = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue  # a notification, or an answer to a request this server never sends
        method, params = message["method"], message.get("params") or {}
        if method == "initialize":
            asked = params.get("protocolVersion")
            result: object = {
                "protocolVersion": asked if asked in KNOWN else KNOWN[1],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "many-tools", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": listed}
        elif method == "tools/call":
            text = str((params.get("arguments") or {}).get("text", ""))
            result = {"content": [{"type": "text", "text": text}]}
        elif method == "ping":
            result = {}
        else:
            error = {"code": -32601, "message": f"no method {method}"}
            out.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}) + "\n")
            out.flush()
            continue
        out.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
