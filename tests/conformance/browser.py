"""
A browser for the conformance suite's sign-ins: C{$BROWSER} for C{mcpx auth login}.

It does what a person's browser does with an authorization URL when the authorization
server approves at once (the suite's does): GET it and follow the redirects, which end
at C{mcpx auth login}'s loopback listener.  Exit status 0 when the last page answered.
"""

from __future__ import annotations

import sys
import urllib.request


def main(url: str) -> int:
    with urllib.request.urlopen(url, timeout=20) as response:
        response.read()
        return 0 if response.status == 200 else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[-1]))
