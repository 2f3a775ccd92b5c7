"""
A stdio server that will not leave: it ignores SIGTERM and keeps running after its
stdin closes, so only SIGKILL ends it.  It answers each request with its pid, which
also tells the test that the SIGTERM handler is in place.
"""

import json
import os
import signal
import sys
import time


def main() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for raw in iter(sys.stdin.buffer.readline, b""):
        message = json.loads(raw)
        if "id" in message:
            result = {"pid": os.getpid()}
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
