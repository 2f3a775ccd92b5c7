"""
The official MCP conformance suite's server leg, run against mcpx's own MCP server.

Each test starts a real daemon (C{python -m mcpx daemon}, a temporary state folder, no
configuration file, so the default configuration with the demo upstream) on a free
loopback port, and points the suite at its Streamable HTTP endpoint C{/mcp}.

Only the scenarios that need none of the suite's fixture tools are run (the others call
tools such as C{test_simple_text} that only the suite's reference server has; they come
with pass-through): L{NO_FIXTURE}, the issue's list and two more.  For each revision
the test asks the suite which of them apply (C{conformance list --server --spec-version
V}), checks that against L{SCENARIOS}, and runs each one alone (C{--scenario S
--spec-version V}), all of a revision at once.  A few scenarios whose subject the older
revisions already oblige a server to honour are also run outside the suite's window
with C{--force} (L{FORCED}).

Verdict: the suite must exit 0 under C{server-expected-failures.yml}, and every check
of every scenario must be a C{SUCCESS}, apart from the checks that file lists, which
must fail with the suite's own "Not testable" message (they need a fixture tool), and
the C{SKIPPED} checks of L{EXPECTED_SKIPS}.

The test talks to the daemon only over loopback, but like the client leg it refuses to
run outside a private network namespace, so that nothing it starts is reachable from
elsewhere and a fixed port cannot collide with the machine's own services.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.utils import getProcessOutput, getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.support.daemons import daemon_environ
from tests.support.peers import conformance_cli, in_private_netns
from tests.support.processes import (
    REPO,
    ChildProcess,
    free_tcp_port,
    kill_on_cleanup,
    reactor,
    spawn,
)

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "server-expected-failures.yml"

#: The server scenarios that need no tool, resource or prompt of the suite's fixture.
NO_FIXTURE = frozenset(
    {
        "server-initialize",
        "server-session-lifecycle",
        "server-stateless",
        "ping",
        "logging-set-level",
        "tools-list",
        "prompts-list",
        "resources-list",
        "dns-rebinding-protection",
        "caching",
        "http-header-validation",
        "http-custom-header-server-validation",
        # Beyond the list, two more that need nothing of the fixture: reading
        # an unknown resource, and three concurrent POSTs answered as streams or JSON.
        "sep-2164-resource-not-found",
        "server-sse-multiple-streams",
    }
)

_LEGACY_FEATURES = frozenset(
    {
        "server-initialize",
        "server-session-lifecycle",
        "ping",
        "logging-set-level",
        "tools-list",
        "prompts-list",
        "resources-list",
    }
)

#: Which of L{NO_FIXTURE} the suite applies at each revision (alpha.12); a change in
#: the suite's windows fails the test.  2024-11-05 is unknown to the suite.
SCENARIOS: Mapping[str, frozenset[str]] = {
    "2025-03-26": frozenset({"server-session-lifecycle"}),
    "2025-06-18": _LEGACY_FEATURES,
    "2025-11-25": _LEGACY_FEATURES | {"dns-rebinding-protection", "server-sse-multiple-streams"},
    "2026-07-28": frozenset(
        {
            "server-stateless",
            "tools-list",
            "prompts-list",
            "resources-list",
            "dns-rebinding-protection",
            "caching",
            "http-header-validation",
            "http-custom-header-server-validation",
            "sep-2164-resource-not-found",
            "server-sse-multiple-streams",
        }
    ),
}

#: Scenarios run with C{--force} before the revision the suite starts them at: the
#: suite's coverage begins at 2025-06-18, but 2025-03-26 already has these methods and
#: the Streamable HTTP transport, whose Origin rule is a MUST since 2025-03-26.
FORCED: Mapping[str, frozenset[str]] = {
    "2025-03-26": frozenset(
        {
            "server-initialize",
            "ping",
            "logging-set-level",
            "tools-list",
            "prompts-list",
            "resources-list",
            "dns-rebinding-protection",
        }
    ),
    "2025-06-18": frozenset({"dns-rebinding-protection"}),
    "2025-11-25": frozenset(),
    "2026-07-28": frozenset(),
}

#: Checks the suite reports C{SKIPPED} for mcpx, by (scenario, check id): mcpx declares
#: no C{listChanged} or C{subscribe} capability to a 2026-07-28 client and answers
#: C{subscriptions/listen} with -32601, which the suite reads as "not applicable".
EXPECTED_SKIPS = frozenset(
    {
        ("server-stateless", "sep-2575-server-sends-subscription-ack"),
        ("server-stateless", "sep-2575-server-tags-subscription-id"),
        ("server-stateless", "sep-2575-server-honors-notification-filter"),
        ("server-stateless", "sep-2575-server-sends-prompts-list-changed-on-subscription"),
        ("server-stateless", "sep-2575-server-sends-tools-list-changed-on-subscription"),
    }
)

#: C{INFO} checks that say nothing against mcpx, by (scenario, check id): mcpx answers
#: a quick C{tools/list} with JSON, not a stream, which the suite notes as allowed.
EXPECTED_INFO = frozenset({("server-sse-multiple-streams", "server-sse-streams-functional")})

#: How the suite starts the message of a check it could not exercise.
NOT_TESTABLE = "Not testable"

#: Checks the baseline lists that the suite words as a plain warning although they are
#: not testable against mcpx either: mcpx declares C{prompts.listChanged} to 2026-07-28
#: clients (a reload or an upstream changes the gateway's prompts, and listens hear of
#: it: tests.server.test_reload_announce, tests.server.test_listen), but the suite can
#: only mutate the prompt list through the fixture's C{test_trigger_prompt_change}
#: tool, which mcpx refuses as unknown (-32602, where the suite expects -32601 to call
#: the check not testable).  Each maps to the start of the suite's message.
EXCUSED_WARNINGS: dict[tuple[str, str], str] = {
    (
        "server-stateless",
        "sep-2575-server-sends-prompts-list-changed-on-subscription",
    ): "Mutated the prompt list but no notifications/prompts/list_changed arrived",
}

#: Milliseconds the suite gives each scenario.
SCENARIO_TIMEOUT_MS = 20_000

_RESULT_DIR = re.compile(r"server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z")
_LISTED = re.compile(r"^\s*-\s+(?P<scenario>\S+)", re.MULTILINE)


def baseline_checks() -> frozenset[tuple[str, str]]:
    """The (scenario, check id) entries of C{server-expected-failures.yml}."""
    entries = set()
    for line in BASELINE.read_text(encoding="utf-8").splitlines():
        entry = line.strip()
        if entry.startswith("- "):
            scenario, colon, check = entry[2:].strip().partition(":")
            if not colon:
                raise AssertionError(f"{BASELINE.name}: {entry!r} excuses a whole scenario")
            entries.add((scenario, check))
    return frozenset(entries)


def objections(scenario: str, checks: list[dict[str, Any]], excused: frozenset[str]) -> list[str]:
    """
    What in one scenario's checks is not a success, one line each.

    @param excused: the check ids the baseline lists for this scenario; they must fail
        as not testable, nothing else.
    """
    lines = []
    for check in checks:
        status, ident = check.get("status"), check.get("id")
        message = check.get("errorMessage") or ""
        if status == "SUCCESS":
            continue
        if status == "SKIPPED" and (scenario, ident) in EXPECTED_SKIPS:
            continue
        if status == "INFO" and (scenario, ident) in EXPECTED_INFO:
            continue
        if status == "FAILURE" and ident in excused and message.startswith(NOT_TESTABLE):
            continue
        warned = EXCUSED_WARNINGS.get((scenario, str(ident)))
        if status == "WARNING" and ident in excused and warned and message.startswith(warned):
            continue
        lines.append(
            f"{scenario}: {ident} ({check.get('name')}) {status}"
            + (f": {message}" if message else "")
        )
    if not any(check.get("status") == "SUCCESS" for check in checks):
        lines.append(f"{scenario}: no check succeeded")
    return lines


class ServerLegTests(TestCase):
    """The suite's server leg against C{/mcp}, one revision per test."""

    timeout = 120

    async def start_daemon(self) -> str:
        """Start C{mcpx daemon} on a free loopback port; return its C{/mcp} URL."""
        # Short paths: the unix sockets under the state folder must fit in 108 bytes.
        state_dir = tempfile.mkdtemp(prefix="mcpx-sl-")
        config_home = tempfile.mkdtemp(prefix="mcpx-slc-")
        self.addCleanup(shutil.rmtree, state_dir, True)
        self.addCleanup(shutil.rmtree, config_home, True)
        port = free_tcp_port()
        argv = [
            sys.executable,
            "-m",
            "mcpx",
            "daemon",
            "--daemon-listen",
            f"tcp:{port}:interface=127.0.0.1",
        ]
        child = spawn(argv, env=daemon_environ(state_dir, config_home), cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        self.addCleanup(self.stop_daemon, child)
        await child.wait_for(rb"listening on http://127\.0\.0\.1:\d+")
        return f"http://127.0.0.1:{port}/mcp"

    async def stop_daemon(self, child: ChildProcess) -> None:
        child.signal("TERM")
        await child.ended()

    async def applicable(self, revision: str) -> frozenset[str]:
        """Which of L{NO_FIXTURE} the suite applies at C{revision}."""
        cli = conformance_cli()
        listing = await getProcessOutput(
            cli[0],
            [*cli[1:], "list", "--server", "--spec-version", revision],
            env=dict(os.environ),
            path=str(REPO),
            reactor=reactor,
        )
        listed = {m["scenario"] for m in _LISTED.finditer(listing.decode("utf-8"))}
        return frozenset(listed & NO_FIXTURE)

    async def run_scenario(
        self, url: str, scenario: str, revision: str, output: Path, *, force: bool
    ) -> tuple[str, Path, int, str]:
        """Run one scenario; return its name, its result folder, the exit code and output."""
        folder = output / scenario
        cli = conformance_cli()
        arguments = [
            *cli[1:],
            "server",
            "--url",
            url,
            "--scenario",
            scenario,
            "--spec-version",
            revision,
            *(["--force"] if force else []),
            "--expected-failures",
            str(BASELINE),
            "--timeout",
            str(SCENARIO_TIMEOUT_MS),
            "-o",
            str(folder),
        ]
        out, err, code = await getProcessOutputAndValue(
            cli[0], arguments, env=dict(os.environ), path=str(REPO), reactor=reactor
        )
        text = (out + err).decode("utf-8", "replace")
        # The suite prints the scenario's long description first; its verdict is last.
        return scenario, folder, code, text[text.rfind("Test Results:") :]

    async def run_suite(self, revision: str) -> None:
        if not in_private_netns():
            self.fail(
                "run the conformance server leg in a private network namespace (`make test` "
                "does, through tests/isolated; by hand: unshare -n sh -c 'ip link set lo up "
                "&& exec ...')"
            )
        failures: list[str] = []
        applicable = await self.applicable(revision)
        if applicable != SCENARIOS[revision]:
            failures.append(
                f"the suite applies {sorted(applicable)} at {revision}, expected"
                f" {sorted(SCENARIOS[revision])}"
            )
        url = await self.start_daemon()
        output = Path(self.mktemp()).resolve()
        output.mkdir(parents=True)
        runs = [(name, False) for name in sorted(applicable)]
        runs += [(name, True) for name in sorted(FORCED[revision])]
        outcomes = await gatherResults(
            [
                Deferred.fromCoroutine(self.run_scenario(url, name, revision, output, force=force))
                for name, force in runs
            ]
        )
        excused = baseline_checks()
        for scenario, folder, code, text in outcomes:
            found = [
                p for p in folder.glob("*/checks.json") if _RESULT_DIR.fullmatch(p.parent.name)
            ]
            if len(found) != 1:
                failures.append(f"{scenario}: no result written (exit {code}):\n{text[-1500:]}")
                continue
            if code != 0:
                failures.append(f"{scenario}: the suite exited {code}:\n{text[-1500:]}")
            checks = json.loads(found[0].read_text(encoding="utf-8"))
            failures.extend(
                objections(scenario, checks, frozenset(c for s, c in excused if s == scenario))
            )
        if failures:
            self.fail(f"conformance server leg at {revision}:\n  " + "\n  ".join(failures))

    async def test_2025_03_26(self) -> None:
        """
        At 2025-03-26 mcpx passes the session lifecycle (initialize mints a session,
        DELETE ends it, the ended session is 404), and, forced, initialize, ping,
        logging/setLevel, the three lists and Origin checking.
        """
        await self.run_suite("2025-03-26")

    async def test_2025_06_18(self) -> None:
        """
        At 2025-06-18 mcpx passes initialize, the session lifecycle, ping,
        logging/setLevel and tools, prompts and resources lists, each frame valid
        against the revision's schema; and, forced, Origin checking.
        """
        await self.run_suite("2025-06-18")

    async def test_2025_11_25(self) -> None:
        """
        At 2025-11-25 mcpx passes the 2025-06-18 set, DNS-rebinding protection and
        three concurrent POSTs on one session.
        """
        await self.run_suite("2025-11-25")

    async def test_2026_07_28(self) -> None:
        """
        At 2026-07-28 mcpx passes the stateless rules (per-request _meta, discover,
        version errors, header mismatch, removed methods 404), the three lists, Origin
        checking, cache hints, the standard header checks, the error for an unknown
        resource and concurrent POSTs; the checks that need a fixture tool fail only as
        not testable.
        """
        await self.run_suite("2026-07-28")
