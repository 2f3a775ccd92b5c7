"""
A small stdio MCP-ish server for the real-process tests of L{mcpx.upstream.stdio}.

It answers every JSON-RPC request line with C{{"echo": params, "pid": ...}}, except
C{exit}, which makes it exit at once with C{params["status"]} and no answer.  Before
reading anything it prints a line of garbage on stdout and a line on stderr, as
careless servers do.
"""

import io
import json
import os
import sys


def main() -> None:
    out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8")
    out.write("echo server ready (this line is not JSON)\n")
    out.flush()
    sys.stderr.write("echo server: listening on stdin\n")
    sys.stderr.flush()
    for raw in iter(sys.stdin.buffer.readline, b""):
        message = json.loads(raw)
        if "id" not in message or "method" not in message:
            continue
        params = message.get("params") or {}
        if message["method"] == "exit":
            sys.exit(params["status"])
        if message["method"] == "complain":
            sys.stderr.write(params["text"] + "\n")
            sys.stderr.flush()
        result = {"echo": params, "pid": os.getpid()}
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        out.write(json.dumps(answer, ensure_ascii=False) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
