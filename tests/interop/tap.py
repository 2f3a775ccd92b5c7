"""
Runs a newline-delimited MCP program and records every line that passes, so a test can
validate what mcpx sent: C{python tap.py LOG -- COMMAND ARGS...}. Each line of LOG is
C{> JSON} (from our stdin to the program) or C{< JSON} (from the program to our stdout).
A LOG that is a folder gets one file per run, C{<pid>.tap}: the ids of several
processes started from one command (as mcpx starts several instances of one server)
are then never mixed up.
Only the standard library: it runs under whichever interpreter the caller has.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import IO


def _pump(
    source: IO[bytes], sink: IO[bytes], log: IO[bytes], mark: bytes, lock: threading.Lock
) -> None:
    for line in iter(source.readline, b""):
        with lock:
            log.write(mark + line if line.endswith(b"\n") else mark + line + b"\n")
            log.flush()
        sink.write(line)
        sink.flush()
    sink.close()


def main() -> int:
    log_path, separator, *command = sys.argv[1:]
    assert separator == "--", "usage: tap.py LOG -- COMMAND ARGS..."
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    lock = threading.Lock()
    if os.path.isdir(log_path):
        log_path = os.path.join(log_path, f"{os.getpid()}.tap")
    with open(log_path, "ab") as log:
        inbound = threading.Thread(
            target=_pump, args=(sys.stdin.buffer, child.stdin, log, b"> ", lock), daemon=True
        )
        inbound.start()
        _pump(child.stdout, sys.stdout.buffer, log, b"< ", lock)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
