"""
The official suite's server leg against its own reference server (C{tests/peers/reference},
the suite's C{everything-server.ts}, a dual-era Streamable HTTP server), directly and
through mcpx's C{/mcp} passing it through: mcpx must score what the server scores alone.

Each run is C{--requirements 2025-11-25} or C{--requirements 2026-07-28}; what is compared
is the set of scored checks that fail (C{scenario:check-id}), which must be exactly the one
spec/official-suite.md lists for that run and side, so a change either way is noticed.

Like the other conformance legs this refuses to run outside a private network namespace
(the reference server listens on every interface).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from twisted.trial.unittest import TestCase

from tests.interop.peers import run_daemon
from tests.interop.test_ts_upstreams import suite_failures
from tests.support.peers import start_reference_server
from tests.support.processes import reactor

_CHECK = re.compile(r"^(\S+): (\S+) ")

#: The reference server's own failing scored checks (spec/official-suite.md): at
#: 2026-07-28 its stateless tools/call answered over SSE lacks resultType, and it draws
#: a WARNING (a failure under a baseline) for SEP-2322's validate-input.
ALONE: Mapping[str, frozenset[str]] = {
    "2025-11-25": frozenset(),
    "2026-07-28": frozenset(
        {"input-required-result-validate-input:sep-2322-validate-input-responses"}
    )
    | frozenset(
        f"tools-call-{name}:wire-schema-valid"
        for name in (
            "simple-text",
            "image",
            "audio",
            "embedded-resource",
            "mixed-content",
            "error",
            "with-progress",
        )
    ),
}

#: What fails through mcpx (spec/official-suite.md): nothing of the server's own failures
#: (mcpx's results carry resultType); at 2025-11-25 era mirroring meets a legacy host's
#: calls in its era, so the tools that ask their client on the connection pass too.
THROUGH_MCPX: Mapping[str, frozenset[str]] = {
    "2025-11-25": frozenset(),
    "2026-07-28": frozenset(),
}


class ReferenceServerLegTests(TestCase):
    timeout = 300

    async def failing(self, url: str, revision: str) -> frozenset[str]:
        """The scored checks failing at C{url} under C{--requirements revision}."""
        lines = await suite_failures(self, url, "--requirements", revision)
        found = set()
        for line in lines:
            match = _CHECK.match(line)
            if match is not None and not line.startswith("the suite exited"):
                found.add(f"{match.group(1)}:{match.group(2)}")
        return frozenset(found)

    async def test_scores(self) -> None:
        """
        Alone and through mcpx, at both revisions, the failing scored checks are exactly
        the ones listed: through mcpx none of the server's own, and none of its own
        either.
        """
        server = await start_reference_server(reactor, add_cleanup=self.addCleanup)
        daemon = await run_daemon(self, {"url": server.url})
        seen = {}
        for revision in ("2025-11-25", "2026-07-28"):
            seen[("alone", revision)] = await self.failing(server.url, revision)
            seen[("mcpx", revision)] = await self.failing(daemon.url, revision)
        expected = {
            **{("alone", revision): checks for revision, checks in ALONE.items()},
            **{("mcpx", revision): checks for revision, checks in THROUGH_MCPX.items()},
        }
        self.maxDiff = None
        self.assertEqual(seen, expected)
