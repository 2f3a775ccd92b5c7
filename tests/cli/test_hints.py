"""The daemon's route hints, printed by a command, name the command to run."""

from __future__ import annotations

import json
from typing import Any, NoReturn

from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli.client import ApiError, DaemonClient
from mcpx.cli.failures import ask
from mcpx.cli.hints import COMMANDS, in_cli_words
from mcpx.cli.render import error_text, event_line
from mcpx.ops import routes


class InCliWordsTests(SynchronousTestCase):
    def test_routes_become_commands(self) -> None:
        """Each route the daemon's errors name reads as the command that does the same."""
        said = {
            "no server 'x'; GET /v1/servers lists them": "no server 'x'; `mcpx servers` lists them",
            "exited; GET /v1/events?server=crashy shows why": (
                "exited; `mcpx events --server crashy` shows why"
            ),
            "collect it with GET /v1/tasks/{id}": "collect it with `mcpx tasks show ID`",
            "(GET /v1/questions/q_1 shows what it asks)": "(`mcpx elicit q_1` shows what it asks)",
            "GET /v1/questions?all=true lists the ones kept": (
                "`mcpx elicit --all` lists the ones kept"
            ),
            "POST /v1/reload (or send SIGHUP) again": "`mcpx reload` (or send SIGHUP) again",
            "see POST /v1/servers/a%2Fb/restart": "see `mcpx restart a/b`",
        }
        for message, expected in said.items():
            self.assertEqual(in_cli_words(message), expected)

    def test_routes_without_a_command_stay(self) -> None:
        """A route no command stands for, or text that is no route, is left as it is."""
        for message in (
            "read it in ranges: POST /v1/artifacts/read with offset",
            "GET /v1/serversfoo is no route",
            "no hint here",
        ):
            self.assertEqual(in_cli_words(message), message)

    def test_every_command_has_its_route(self) -> None:
        """The table speaks only of ops mcpx.ops.routes has, so it cannot drift silently."""
        self.assertEqual(set(COMMANDS) - set(routes.ROUTES), set())


class PrintedErrorTests(SynchronousTestCase):
    def test_cli_names_the_command_while_json_keeps_the_route(self) -> None:
        """
        A daemon error a command prints names C{mcpx servers}; with C{--json} the API's
        error on stdout is the daemon's own, naming the route.
        """
        body = {"code": "unknown_server", "message": "no server 'x'; GET /v1/servers lists them"}
        lines: list[tuple[str, bool]] = []

        def echo(message: str, *, err: bool = False) -> None:
            lines.append((message, err))

        def work() -> NoReturn:
            raise ApiError(404, body["code"], body["message"], body)

        client: Any = DaemonClient.__new__(DaemonClient)
        with self.assertRaises(SystemExit):
            ask(client, True, work, echo)
        [(api_json, on_stderr), (printed, to_stderr)] = lines
        self.assertFalse(on_stderr)
        self.assertEqual(json.loads(api_json)["error"]["message"], body["message"])
        self.assertTrue(to_stderr)
        self.assertEqual(printed, "mcpx: no server 'x'; `mcpx servers` lists them")

    def test_retry_delay_rounded(self) -> None:
        """The daemon's retry_in of 0.999968 seconds is said as 1s."""
        text = error_text({"message": "exited", "retry_in": 0.999968})
        self.assertEqual(text, "exited\n  the daemon will retry in 1s")
        self.assertIn("retry in 2.5s", error_text({"message": "m", "retry_in": 2.4999}))

    def test_retry_said_once(self) -> None:
        """A message that gives its next start already is not followed by the same delay."""
        text = error_text({"message": "could not start; next start in 1s", "retry_in": 1.0})
        self.assertEqual(text, "could not start; next start in 1s")

    def test_api_advice_in_cli_words(self) -> None:
        """Advice to set an API body field or query parameter is said as the command's
        option: a timeout's suggestion names --timeout, watch's server= is --server."""
        timed_out = in_cli_words(
            'no answer within 30s; or pass "task": true to collect the result later'
        )
        self.assertIn("--timeout", timed_out)
        self.assertNotIn('pass "task"', timed_out)
        watched = in_cli_words(
            "a URI that is not mcpx:// needs exactly one server= to say whose it is"
        )
        self.assertIn("--server", watched)
        self.assertNotIn("server=", watched)

    def test_event_retry_delay_rounded(self) -> None:
        """C{mcpx events} says a server.exited event's retry_in as 1s, not 0.999968."""
        line = event_line("server.exited", {"server": "crashy", "retry_in": 0.999968}, 0.0)
        self.assertTrue(line.endswith(" server.exited crashy retry_in=1s"), line)
