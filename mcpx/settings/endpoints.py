# -*- test-case-name: tests.settings.test_endpoints -*-
"""
Reading Twisted endpoint strings without Twisted: the CLI needs to look inside
C{daemon.listen} (to print the C{/mcp} address) and must not import the reactor.
"""

from __future__ import annotations


def split_endpoint(description: str) -> list[str]:
    """
    An endpoint string's parts, split on unescaped colons, with C{\\:} unescaped:
    C{tcp:8899:interface=\\:\\:1} is C{["tcp", "8899", "interface=::1"]}.
    """
    parts: list[str] = []
    current: list[str] = []
    chars = iter(description)
    for char in chars:
        if char == "\\":
            current.append(next(chars, ""))
        elif char == ":":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts
