# -*- test-case-name: tests.scripts.test_runner -*-
"""
The lines between the daemon and a script worker: one JSON object each.

Daemon to worker:

 - C{{"start": {"program", "inputs", "servers": [name, ...], "limits", "out"}}},
   once, first;
 - C{{"result": <call id>, "value": ...}} or C{{"result": <call id>, "error": "..."}},
   one for each call the worker asked for, in any order.

Worker to daemon:

 - C{{"print": "..."}}: what the program printed;
 - C{{"call": <id>, "fn": "tool", "server", "tool", "arguments"}} and
   C{{"call": <id>, "fn": "stubs", "server"}}: a call the program made, answered by a
   result line; several may be outstanding at once;
 - C{{"done": {"json": value}}} or C{{"done": {"repr": "..."}}}: the program's value;
 - C{{"failed": {"kind", "message"}}}: it did not finish (C{kind}: syntax, runtime,
   program, crashed, worker).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class ProgramError(Exception):
    """The program did something the worker will not do for it."""


def encode(message: Mapping[str, Any]) -> bytes:
    """One line: compact JSON (a raw newline never appears in it) and a newline."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
