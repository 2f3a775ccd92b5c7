"""
The official MCP conformance suite's client leg, run against mcpx's upstream client.

For each revision the suite runs every client scenario that applies to it
(C{--suite all --spec-version V}) in parallel: a mock server per scenario, and
C{tests/conformance/client.py} as the client (which hands the OAuth scenarios to
C{tests/conformance/auth_client.py}: a daemon, C{mcpx auth login}, C{mcpx call}).
Every scenario that applies must have run, and each of its checks must be a success;
C{expected-failures.yml} lists none.

The mock servers listen on every interface, so this refuses to run outside a private
network namespace (C{make test} runs the tests under C{tests/isolated}).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.conformance.auth_client import REFUSED_MARK
from tests.conformance.client import OK_MARK
from tests.support.peers import conformance_cli, in_private_netns
from tests.support.processes import REPO, reactor

HERE = Path(__file__).resolve().parent
CLIENT = HERE / "client.py"
BASELINE = HERE / "expected-failures.yml"

#: The non-OAuth client scenarios each revision applies (`conformance list --client
#: --spec-version V`, alpha.12); a scenario the suite adds or drops fails the test.
SCENARIOS: Mapping[str, frozenset[str]] = {
    "2025-03-26": frozenset(),
    "2025-06-18": frozenset({"initialize", "tools_call"}),
    "2025-11-25": frozenset(
        {
            "initialize",
            "tools_call",
            "elicitation-sep1034-client-defaults",
            "sse-retry",
            "json-schema-2020-12-preservation",
        }
    ),
    "2026-07-28": frozenset(
        {
            "tools_call",
            "request-metadata",
            "sep-2322-client-request-state",
            "http-standard-headers",
            "http-custom-headers",
            "http-invalid-tool-headers",
            "json-schema-ref-no-deref",
            "json-schema-2020-12-preservation",
        }
    ),
}

_AUTH_2025_11_25 = frozenset(
    "auth/" + name
    for name in (
        "metadata-default",
        "metadata-var1",
        "metadata-var2",
        "metadata-var3",
        "basic-cimd",
        "scope-from-www-authenticate",
        "scope-from-scopes-supported",
        "scope-omitted-when-undefined",
        "scope-step-up",
        "scope-retry-limit",
        "token-endpoint-auth-basic",
        "token-endpoint-auth-post",
        "token-endpoint-auth-none",
        "pre-registration",
    )
)

#: The OAuth client scenarios the suite runs at each revision; all must pass.
AUTH_SCENARIOS: Mapping[str, frozenset[str]] = {
    "2025-03-26": frozenset(
        {"auth/2025-03-26-oauth-metadata-backcompat", "auth/2025-03-26-oauth-endpoint-fallback"}
    ),
    "2025-06-18": frozenset(
        "auth/token-endpoint-auth-" + method for method in ("basic", "post", "none")
    ),
    "2025-11-25": _AUTH_2025_11_25,
    "2026-07-28": _AUTH_2025_11_25
    | frozenset(
        "auth/" + name
        for name in (
            "resource-mismatch",
            "offline-access-scope",
            "offline-access-not-supported",
            "authorization-server-migration",
            "iss-supported",
            "iss-not-advertised",
            "iss-supported-missing",
            "iss-wrong-issuer",
            "iss-unexpected",
            "iss-normalized",
            "metadata-issuer-mismatch",
        )
    ),
}

#: The scenarios of the client-credentials extension (the suite scores no extension in
#: a revision's run, so each is run on its own, at the suite's default revision): a
#: daemon with the client id and secret or private key the suite hands out, and
#: C{mcpx call} with nobody signing in.
EXTENSION_SCENARIOS = frozenset({"auth/client-credentials-basic", "auth/client-credentials-jwt"})

#: What the suite prints when every check of a scenario it ran passed.
OVERALL_PASSED = "OVERALL: PASSED"

#: The OAuth scenarios where the right outcome is that mcpx refuses: a protected-resource
#: document about another server, an authorization response or metadata from the wrong
#: issuer, and a server that keeps asking for scopes after every sign-in.
REFUSALS = frozenset(
    "auth/" + name
    for name in (
        "resource-mismatch",
        "iss-supported-missing",
        "iss-wrong-issuer",
        "iss-unexpected",
        "iss-normalized",
        "metadata-issuer-mismatch",
        "scope-retry-limit",
    )
)

#: Checks the suite reports SKIPPED for a correct client, by (scenario, check name):
#: a 2026-07-28 client sends neither C{initialize} nor C{notifications/initialized}.
EXPECTED_SKIPS = frozenset(
    {
        ("http-standard-headers", "ClientMcpMethodHeader_initialize"),
        ("http-standard-headers", "ClientMcpMethodHeader_notifications_initialized"),
    }
)

#: Statuses that say nothing against the client (the suite's own trace of the exchange).
NEUTRAL = frozenset({"INFO"})

#: Milliseconds the suite gives the client in each scenario before killing it.  The
#: suite runs every scenario at once, and each OAuth one starts a daemon and four mcpx
#: commands: on a loaded two-core machine that takes a minute for all of them.
SCENARIO_TIMEOUT_MS = 120_000

#: The suite colours its terminal output.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

_RESULT_DIR = re.compile(r"(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z")


def client_command() -> str:
    """
    The client command line as the suite wants it: it splits on single spaces and runs
    the pieces through a shell, so neither path may hold a space.
    """
    parts = [sys.executable, str(CLIENT)]
    for part in parts:
        if " " in part or "'" in part or '"' in part:
            raise AssertionError(f"the conformance suite cannot run a command from {part!r}")
    return " ".join(parts)


def baseline_scenarios() -> set[str]:
    """The scenarios C{expected-failures.yml} lists (whole-scenario entries only)."""
    listed = set()
    for line in BASELINE.read_text(encoding="utf-8").splitlines():
        entry = line.strip()
        if entry.startswith("- "):
            listed.add(entry[2:].strip())
    return listed


def results(output: Path) -> dict[str, Path]:
    """Each scenario the suite ran, by name, to the folder holding its C{checks.json}."""
    found: dict[str, Path] = {}
    for checks in output.rglob("checks.json"):
        match = _RESULT_DIR.fullmatch(checks.parent.name)
        if match is None:
            raise AssertionError(f"unexpected result folder {checks.parent}")
        prefix = "auth/" if checks.parent.parent.name == "auth" else ""
        found[prefix + match["scenario"]] = checks.parent
    return found


def objections(scenario: str, checks: list[dict[str, Any]]) -> list[str]:
    """What in a scenario's checks is not a success, one line each."""
    lines = []
    for check in checks:
        status = check.get("status")
        if status == "SUCCESS" or status in NEUTRAL:
            continue
        if status == "SKIPPED" and (scenario, check.get("name")) in EXPECTED_SKIPS:
            continue
        lines.append(
            f"{scenario}: {check.get('id')} ({check.get('name')}) {status}"
            + (f": {check['errorMessage']}" if check.get("errorMessage") else "")
        )
    if not any(check.get("status") == "SUCCESS" for check in checks):
        lines.append(f"{scenario}: no check succeeded")
    return lines


class ClientLegTests(TestCase):
    """The suite's client leg at each revision, judged by its own checks."""

    timeout = 400

    def require_private_netns(self) -> None:
        if not in_private_netns():
            self.fail(
                "the conformance suite's mock servers listen on every interface: run this "
                "test in a private network namespace (`make test` does, through "
                "tests/isolated; by hand: unshare -n sh -c 'ip link set lo up && exec ...')"
            )

    async def run_suite(self, revision: str) -> None:
        self.require_private_netns()
        output = Path(self.mktemp()).resolve()
        output.mkdir(parents=True)
        cli = conformance_cli()
        arguments = [
            *cli[1:],
            "client",
            "--command",
            client_command(),
            "--suite",
            "all",
            "--spec-version",
            revision,
            "--expected-failures",
            str(BASELINE),
            "--timeout",
            str(SCENARIO_TIMEOUT_MS),
            "-o",
            str(output),
        ]
        out, err, code = await getProcessOutputAndValue(
            cli[0], arguments, env=dict(os.environ), path=str(REPO), reactor=reactor
        )
        summary = out.decode("utf-8", "replace")
        summary = summary[summary.find("=== SUITE SUMMARY ===") :]

        ran = results(output)
        failures: list[str] = []
        if code != 0:
            failures.append(f"the suite exited {code} (unexpected or stale baseline entries)")
        expected = SCENARIOS[revision]
        plain = {name for name in ran if not name.startswith("auth/")}
        if plain != expected:
            failures.append(
                f"scenarios run {sorted(plain)}, expected {sorted(expected)}"
                f" (missing {sorted(expected - plain)}, new {sorted(plain - expected)})"
            )
        signed = {name for name in ran if name.startswith("auth/")}
        expected_auth = AUTH_SCENARIOS[revision]
        if signed != expected_auth:
            failures.append(
                f"OAuth scenarios run {sorted(signed)}, expected {sorted(expected_auth)}"
            )
        listed = baseline_scenarios()
        if listed:
            failures.append(f"the baseline lists {sorted(listed)}; it should list nothing")
        for name in sorted(plain | signed):
            folder = ran[name]
            checks = json.loads((folder / "checks.json").read_text(encoding="utf-8"))
            failures.extend(objections(name, checks))
            mark = REFUSED_MARK if name in REFUSALS else OK_MARK
            if mark.format(scenario=name) not in (folder / "stdout.txt").read_text():
                stderr = (folder / "stderr.txt").read_text()[-1500:]
                failures.append(f"{name}: the client did not finish its interaction:\n{stderr}")
        if failures:
            self.fail(
                f"conformance client leg at {revision}:\n  "
                + "\n  ".join(failures)
                + f"\n{summary}\n{err.decode('utf-8', 'replace')[-2000:]}"
            )

    async def test_2025_03_26(self) -> None:
        """At 2025-03-26 only OAuth scenarios apply, and they fail as the baseline says."""
        await self.run_suite("2025-03-26")

    async def test_2025_06_18(self) -> None:
        """At 2025-06-18 mcpx passes initialize and tools_call; OAuth fails as listed."""
        await self.run_suite("2025-06-18")

    async def test_2025_11_25(self) -> None:
        """
        At 2025-11-25 mcpx passes initialize, tools_call, elicitation defaults (the host
        answers with the schema's defaults), SSE retry and resumption, and JSON Schema
        2020-12 preservation; OAuth fails as listed.
        """
        await self.run_suite("2025-11-25")

    async def test_2026_07_28(self) -> None:
        """
        At 2026-07-28 mcpx passes tools_call, per-request metadata, request-state
        rounds, standard and custom HTTP headers, dropping tools with invalid header
        annotations, no remote $ref fetching and JSON Schema preservation; OAuth fails
        as listed.
        """
        await self.run_suite("2026-07-28")

    async def test_client_credentials_extension(self) -> None:
        """
        The client-credentials extension's two scenarios, each through a daemon and
        C{mcpx tools} and C{mcpx call} with nobody signing in: the client secret by
        HTTP Basic, and a private-key JWT assertion (ES256, the key the suite makes).
        Each must run, succeed in every check, and make the suite print OVERALL: PASSED.
        """
        self.require_private_netns()
        cli = conformance_cli()
        failures: list[str] = []
        for scenario in sorted(EXTENSION_SCENARIOS):
            output = Path(self.mktemp()).resolve()
            output.mkdir(parents=True)
            arguments = [
                *cli[1:],
                "client",
                "--command",
                client_command(),
                "--scenario",
                scenario,
                "--timeout",
                str(SCENARIO_TIMEOUT_MS),
                "-o",
                str(output),
            ]
            out, err, code = await getProcessOutputAndValue(
                cli[0], arguments, env=dict(os.environ), path=str(REPO), reactor=reactor
            )
            # The suite prints its verdict on stderr, its trace on stdout.
            printed = _ANSI.sub("", (out + err).decode("utf-8", "replace"))
            ran = results(output)
            if set(ran) != {scenario}:
                failures.append(f"{scenario}: the suite ran {sorted(ran)}")
                continue
            folder = ran[scenario]
            checks = json.loads((folder / "checks.json").read_text(encoding="utf-8"))
            failures.extend(objections(scenario, checks))
            if OK_MARK.format(scenario=scenario) not in (folder / "stdout.txt").read_text():
                stderr = (folder / "stderr.txt").read_text()[-1500:]
                failures.append(f"{scenario}: the client did not finish:\n{stderr}")
            if code != 0 or OVERALL_PASSED not in printed:
                failures.append(
                    f"{scenario}: the suite exited {code} without {OVERALL_PASSED}:\n"
                    + printed[-2000:]
                )
        if failures:
            self.fail("client-credentials extension:\n  " + "\n  ".join(failures))
