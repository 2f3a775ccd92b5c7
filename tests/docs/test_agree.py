"""
The user documentation cannot drift from the program: the route table of C{docs/api.md} is
the daemon's own C{/openapi.json}, every command of the C{mcpx} click tree has its section in
C{docs/cli.md}, and the exit statuses that page tabulates are the ones the commands use.
(The settings of C{docs/configuration.md} are checked in L{tests.settings.test_docs}.)
"""

from __future__ import annotations

import re
from pathlib import Path

import click
from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli import failures
from mcpx.cli.main import main as cli
from mcpx.ops.openapi import openapi_document
from mcpx.ops.table import OPS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _section(text: str, heading: str) -> str:
    """The lines of C{text} under the heading C{heading}, up to the next heading of its level."""
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1 :]
    stop = re.search(rf"^{level} ", rest, re.MULTILINE)
    return rest[: stop.start()] if stop else rest


def _api_routes() -> set[str]:
    """C{METHOD /path} for each row of api.md's route table."""
    table = _section((DOCS / "api.md").read_text(encoding="utf-8"), "## The routes")
    return set(re.findall(r"^\| `((?:GET|POST|PUT|DELETE|PATCH) [^`]+)` \|", table, re.MULTILINE))


def _commands(group: click.Group, prefix: str = "mcpx") -> set[str]:
    """Every command of the click tree as typed, groups and their subcommands alike."""
    names = set()
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if command is None or command.hidden:
            continue
        full = f"{prefix} {name}"
        names.add(full)
        if isinstance(command, click.Group):
            names |= _commands(command, full)
    return names


class RouteTableTests(SynchronousTestCase):
    def test_every_route_of_the_api_is_in_the_table(self) -> None:
        """Each operation of C{/openapi.json} is a row of api.md's route table, and no row names
        a route the daemon does not have."""
        document = openapi_document(OPS)
        served = {
            f"{method.upper()} {path}"
            for path, operations in document["paths"].items()
            for method in operations
        }
        documented = _api_routes()
        self.assertEqual(sorted(served - documented), [], "routes missing from docs/api.md")
        extra = documented - served - {"GET /openapi.json", "GET /health", "POST /mcp"}
        self.assertEqual(sorted(extra), [], "routes in docs/api.md the daemon does not serve")


class CommandTests(SynchronousTestCase):
    def test_every_command_has_a_section(self) -> None:
        """Each command (and each subcommand) of the C{mcpx} click tree is named in a heading
        of cli.md."""
        headings = re.findall(r"^#{2,4} (.+)$", (DOCS / "cli.md").read_text(encoding="utf-8"), re.M)
        named = " ".join(headings)
        missing = []
        for command in sorted(_commands(cli)):
            top, *sub = command.split(" ")[1:]
            # A group's subcommands are named as `mcpx auth login|status|logout`.
            head = re.search(rf"`mcpx {re.escape(top)}[ `]", named)
            under = not sub or re.search(
                rf"`mcpx {re.escape(top)} [^`]*\b{re.escape(sub[0])}\b", named
            )
            if not (head and under):
                missing.append(command)
        self.assertEqual(missing, [], "commands without a section in docs/cli.md")

    def test_exit_statuses_are_the_ones_used(self) -> None:
        """The exit status table of cli.md lists exactly the statuses L{failures} defines."""
        table = _section((DOCS / "cli.md").read_text(encoding="utf-8"), "## Exit status")
        documented = {int(n) for n in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}
        defined = {0} | {
            value
            for name, value in vars(failures).items()
            if name.startswith("EXIT_") and isinstance(value, int)
        }
        self.assertEqual(documented, defined)
