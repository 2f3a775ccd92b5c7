"""
Tests for C{mcpx elicit}: listing and answering the questions upstream servers asked.

Most tests run the command in process with click's C{CliRunner}, its client answered by
the daemon's real C{/v1} routes over a real L{Broker} on a fake clock (in memory, through
the same harness as C{tests.daemon}); a few run C{python -m mcpx elicit} as a child
process against those routes served on the state directory's unix socket.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import Site

from mcpx.cli import elicit as elicit_module
from mcpx.cli.client import DaemonClient, error_from
from mcpx.cli.elicit import questions_text, root_uri, summary
from mcpx.cli.main import main
from mcpx.questions.broker import Broker
from mcpx.questions.record import Question
from mcpx.spec.questions import ELICIT, LIST_ROOTS, SAMPLE
from tests.cli.test_commands import CommandRunner
from tests.daemon.fake_pool import Answer, Harness, daemon_http, swap_part
from tests.support.processes import reactor

FORM = {
    "message": "github (via mcpx) asks: which repository?",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "repo": {"type": "string", "minLength": 1, "title": "Repository"},
            "private": {"type": "boolean", "default": False},
        },
        "required": ["repo"],
    },
}

#: A form with one field of every sort the command renders differently.
RICH_FORM = {
    "message": "tracker (via mcpx) asks: file the issue how?",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "title": "Title", "description": "One line."},
            "priority": {
                "type": "string",
                "oneOf": [
                    {"const": "low", "title": "Low"},
                    {"const": "high", "title": "High"},
                ],
                "default": "low",
            },
            "count": {"type": "integer", "minimum": 1, "maximum": 5},
            "urgent": {"type": "boolean"},
            "labels": {
                "type": "array",
                "items": {"enum": ["bug", "docs", "ui"]},
            },
            "due": {"type": "string", "format": "date"},
        },
        "required": ["title", "count"],
    },
}

SAMPLING = {
    "systemPrompt": "You are terse.",
    "messages": [{"role": "user", "content": {"type": "text", "text": "Say hello"}}],
    "maxTokens": 50,
}


class HarnessClient(DaemonClient):
    """A daemon client whose requests the daemon's routes answer in memory."""

    def __init__(self, harness: Harness) -> None:
        super().__init__(Path("/nonexistent/mcpx.sock"))
        self.harness = harness
        self.posted: list[tuple[str, Any]] = []

    def get(self, target: str, *, timeout: float | None = None) -> Any:
        return self._answer(self.harness.get(target, headers={"Mcpx-Client": self.client}))

    def post(self, target: str, body: object, *, timeout: float | None = None) -> Any:
        self.posted.append((target, body))
        return self._answer(self.harness.post(target, body, headers={"Mcpx-Client": self.client}))

    def _answer(self, answer: Answer) -> Any:
        if answer.code >= 400:
            raise error_from(answer.code, answer.json, f"the daemon answered {answer.code}")
        return answer.json


class Outcome:
    """What an ask Deferred fired with, if it has."""

    def __init__(self, answered: Deferred[dict[str, Any]]) -> None:
        self.results: list[dict[str, Any] | Failure] = []
        answered.addBoth(self.results.append)

    @property
    def result(self) -> dict[str, Any] | Failure:
        [only] = self.results
        return only


class ElicitCase(SynchronousTestCase):
    """C{mcpx elicit} in process, against a broker the test asks questions of."""

    def setUp(self) -> None:
        self.harness = Harness()
        self.clock = self.harness.clock
        # The command measures ages with the wall clock: start the fake one there.
        self.clock.advance(time.time() - self.clock.seconds())
        self.broker = Broker(self.clock)
        self.broker.start()
        swap_part(self.harness.http.host, broker=self.broker)
        self.client = HarnessClient(self.harness)
        self.patch(elicit_module, "connect", lambda: self.client)

    def ask(
        self, method: str = ELICIT, params: dict[str, Any] | None = None, server: str = "github"
    ) -> tuple[Question, Outcome]:
        question, answered = self.broker.ask(
            server=server, scope_key="", method=method, params=params or FORM
        )
        return question, Outcome(answered)

    def elicit(self, *args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(main, ["elicit", *args], input=input)

    def sent(self) -> Any:
        """The body of the last answer the command sent."""
        target, body = self.client.posted[-1]
        self.assertTrue(target.endswith("/answer"), target)
        return body


class ListTests(ElicitCase):
    def test_nothing_waiting(self) -> None:
        """With no pending question, the command says so and exits 0."""
        result = self.elicit()
        self.assertEqual((result.exit_code, result.stdout), (0, "no questions are waiting\n"))

    def test_table(self) -> None:
        """The pending questions are listed with id, server, kind, age, expiry and message."""
        form, _ = self.ask()
        sampling, _ = self.ask(SAMPLE, SAMPLING, server="writer")
        result = self.elicit()
        self.assertEqual(result.exit_code, 0, result.output)
        header, first, second = result.stdout.splitlines()
        self.assertEqual(header.split(), ["ID", "SERVER", "KIND", "AGE", "EXPIRES", "QUESTION"])
        self.assertEqual(first.split()[:3], [form.id, "github", "elicitation"])
        self.assertIn("which repository?", first)
        self.assertIn("in 1", first)  # expires in 119s or 120s
        self.assertEqual(second.split()[:3], [sampling.id, "writer", "sampling"])
        self.assertIn("a reply to: Say hello", second)

    def test_json(self) -> None:
        """--json prints the API's list unchanged."""
        question, _ = self.ask()
        result = self.elicit("--json")
        self.assertEqual(result.exit_code, 0, result.output)
        listed = json.loads(result.stdout)["questions"]
        self.assertEqual([(q["id"], q["kind"]) for q in listed], [(question.id, "elicitation")])

    def test_all(self) -> None:
        """--all lists finished questions too, with their state."""
        pending, _ = self.ask()
        declined, _ = self.ask()
        self.broker.decline(declined.id, by="api")
        self.assertNotIn(declined.id, self.elicit().stdout)
        result = self.elicit("--all")
        self.assertIn("STATE", result.stdout.splitlines()[0])
        rows = {line.split()[0]: line.split()[4] for line in result.stdout.splitlines()[1:]}
        self.assertEqual(rows, {pending.id: "pending", declined.id: "declined"})

    def test_summaries(self) -> None:
        """Each kind of question is summed up in a line; an orphaned one says so."""
        url = {"kind": "elicitation", "params": {"mode": "url", "message": "sign in"}}
        self.assertEqual(summary(url), "sign in [url]")
        self.assertEqual(
            summary({"kind": "roots", "params": {}, "orphaned": True})[:11], "[orphaned] "
        )
        self.assertEqual(summary({"kind": "sampling", "params": {}}), "a reply")
        text = questions_text({"questions": []}, 0.0, everything=True)
        self.assertEqual(text, "no questions are kept\n")


class AnswerWithJsonTests(ElicitCase):
    def test_content(self) -> None:
        """
        ID --answer CONTENT accepts an elicitation with that content, answered by cli;
        --json prints the answered question as JSON.
        """
        question, outcome = self.ask()
        result = self.elicit(question.id, "--answer", '{"repo": "mcpx"}', "--json")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual(outcome.result, {"action": "accept", "content": {"repo": "mcpx"}})
        shown = json.loads(result.stdout)
        self.assertEqual((shown["state"], shown["answered_by"]), ("answered", "cli"))

    def test_said_plainly(self) -> None:
        """Without --json, the command says what became of the question in words that fit
        it: the server has the answer, or was told it was declined."""
        question, _ = self.ask()
        result = self.elicit(question.id, "--answer", '{"repo": "mcpx"}')
        self.assertIn(f"{question.id}: answered; github has the answer", result.stdout)
        question, _ = self.ask()
        result = self.elicit(question.id, "--decline")
        self.assertIn(f"{question.id}: declined; github was told it was declined", result.stdout)
        self.assertNotIn("has its answer", result.stdout)

    def test_from_stdin(self) -> None:
        """--answer - reads the answer from standard input."""
        question, outcome = self.ask()
        result = self.elicit(question.id, "--answer", "-", input='{"repo": "from stdin"}')
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual(outcome.result, {"action": "accept", "content": {"repo": "from stdin"}})

    def test_sampling_result(self) -> None:
        """For sampling, the JSON is the whole result."""
        question, outcome = self.ask(SAMPLE, SAMPLING)
        reply = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}
        result = self.elicit(question.id, "--answer", json.dumps(reply))
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual(outcome.result, reply)
        self.assertEqual(self.sent(), {"action": "accept", "result": reply, "by": "cli"})

    def test_invalid_answer(self) -> None:
        """
        Content the form refuses exits 2 with the daemon's reason; the question stays
        pending.
        """
        question, outcome = self.ask()
        result = self.elicit(question.id, "--answer", '{"repo": ""}')
        self.assertEqual(result.exit_code, 2, result.output)
        self.assertIn("repo", result.stderr)
        self.assertIn("still pending", result.stderr)
        self.assertEqual(outcome.results, [])
        self.assertTrue(question.pending)

    def test_decline_and_cancel(self) -> None:
        """--decline and --cancel answer so, and say what happened."""
        declined, declined_outcome = self.ask()
        cancelled, cancelled_outcome = self.ask()
        result = self.elicit(declined.id, "--decline")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertIn(f"{declined.id}: declined", result.stdout)
        self.assertEqual(self.elicit(cancelled.id, "--cancel").exit_code, 0)
        self.assertEqual(declined_outcome.result, {"action": "decline"})
        self.assertEqual(cancelled_outcome.result, {"action": "cancel"})
        self.assertEqual(self.sent(), {"action": "cancel", "by": "cli"})

    def test_show_question(self) -> None:
        """ID --json without an answer prints the question, answering nothing."""
        question, outcome = self.ask()
        for words in ([question.id, "--json"], ["--json", question.id]):
            result = self.elicit(*words)
            self.assertEqual(result.exit_code, 0, result.output)
            self.assertEqual(json.loads(result.stdout)["id"], question.id)
        self.assertEqual((self.client.posted, outcome.results), ([], []))

    def test_unknown(self) -> None:
        """An unknown question exits 3 with the daemon's message."""
        result = self.elicit("q_nope", "--decline")
        self.assertEqual(result.exit_code, 3, result.output)
        self.assertIn("no question 'q_nope'", result.stderr)

    def test_closed(self) -> None:
        """Answering a question that is no longer pending exits 1, saying how it ended."""
        question, _ = self.ask()
        self.broker.cancel(question.id, by="api")
        result = self.elicit(question.id, "--decline")
        self.assertEqual(result.exit_code, 1, result.output)
        self.assertIn("no longer pending", result.stderr)
        self.assertIn("cancelled by api", result.stderr)

    def test_usage_errors(self) -> None:
        """Contradictory or incomplete command lines exit 2 before asking anything."""
        question, _ = self.ask()
        for words in (
            [question.id, "--decline", "--cancel"],
            [question.id, "--decline", "--answer", "{}"],
            ["--decline"],
            ["--answer", "{}"],
            [question.id, "--all"],
            [question.id, "--answer", "{not json"],
            [question.id, "--answer", "[1]"],
            [question.id, "q_other"],
        ):
            result = self.elicit(*words)
            self.assertEqual(result.exit_code, 2, (words, result.output))
        self.assertEqual(self.client.posted, [])
        self.assertTrue(question.pending)

    def test_old_json_answer(self) -> None:
        """
        The old C{ID --json ANSWER} is refused with exit 2 and a sentence naming
        --answer; --json never doubles as the answer, so nothing is sent.
        """
        question, outcome = self.ask()
        result = self.elicit(question.id, "--json", '{"repo": "mcpx"}')
        self.assertEqual(result.exit_code, 2, result.output)
        self.assertIn(f"mcpx elicit {question.id} --answer", result.stderr)
        self.assertEqual((self.client.posted, outcome.results), ([], []))
        self.assertTrue(question.pending)


class InteractiveTests(ElicitCase):
    def test_form(self) -> None:
        """
        The form shows each field; an empty answer takes the default, a required field
        is asked again, and the content sent is typed.
        """
        question, outcome = self.ask()
        result = self.elicit(question.id, input="a\n\nmcpx\n\n")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertIn("which repository?", result.stdout)
        self.assertIn("Repository (repo; required):", result.stdout)
        self.assertIn("private (y/n) [n]", result.stdout)
        self.assertIn("repo: a value is required", result.stderr)
        self.assertEqual(
            outcome.result, {"action": "accept", "content": {"repo": "mcpx", "private": False}}
        )
        self.assertEqual(self.sent()["by"], "cli")

    def test_every_kind_of_field(self) -> None:
        """
        Choices are numbered and taken by number, multiple choices by comma-separated
        numbers, booleans as y/n; a value out of bounds is refused and asked again, and
        an optional field left empty is left out.
        """
        question, outcome = self.ask(params=RICH_FORM)
        typed = ["a", "Crash on start", "2", "9", "3", "y", "1,3", ""]
        result = self.elicit(question.id, input="\n".join(typed) + "\n")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertIn("1) Low [low]", result.stdout)
        self.assertIn("2) High [high]", result.stdout)
        self.assertIn("count (required; a whole number from 1 to 5):", result.stdout)
        self.assertIn("due (YYYY-MM-DD):", result.stdout)
        self.assertIn("Title (title; required):", result.stdout)
        self.assertIn("priority (a number or a value) [Low]:", result.stdout)
        self.assertIn("count: 9 is more than the maximum 5", result.stderr)
        self.assertEqual(
            outcome.result,
            {
                "action": "accept",
                "content": {
                    "title": "Crash on start",
                    "priority": "high",
                    "count": 3,
                    "urgent": True,
                    "labels": ["bug", "ui"],
                },
            },
        )

    def test_form_checked_before_sending(self) -> None:
        """A default the form refuses is caught before sending, and the form asked again."""
        form = json.loads(json.dumps(FORM))
        form["requestedSchema"]["properties"]["repo"]["default"] = ""
        question, outcome = self.ask(params=form)
        result = self.elicit(question.id, input="a\n\n\nmcpx\n\n")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertIn("fill in the form again", result.stderr)
        self.assertEqual(len(self.client.posted), 1)
        self.assertEqual(
            outcome.result, {"action": "accept", "content": {"repo": "mcpx", "private": False}}
        )

    def test_decline(self) -> None:
        """Choosing d declines without asking for the fields."""
        question, outcome = self.ask()
        result = self.elicit(question.id, input="d\n")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertNotIn("Repository", result.stdout)
        self.assertEqual(outcome.result, {"action": "decline"})

    def test_abandoned(self) -> None:
        """Input ending before the form is done leaves the question pending and exits 1."""
        question, outcome = self.ask()
        result = self.elicit(question.id, input="a\n")
        self.assertEqual(result.exit_code, 1, result.output)
        self.assertEqual((self.client.posted, outcome.results), ([], []))

    def test_url(self) -> None:
        """A URL elicitation shows the URL and is accepted without content."""
        params = {"mode": "url", "url": "https://example.com/auth", "message": "sign in"}
        question, outcome = self.ask(params=params)
        result = self.elicit(question.id, input="a\n")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertIn("URL: https://example.com/auth", result.stdout)
        self.assertEqual(outcome.result, {"action": "accept"})

    def test_sampling(self) -> None:
        """Sampling shows the conversation and sends the reply typed, as model "human"."""
        question, outcome = self.ask(SAMPLE, SAMPLING)
        result = self.elicit(question.id, input="a\n\nHello!\n")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertIn("system prompt: You are terse.", result.stdout)
        self.assertIn("[user] Say hello", result.stdout)
        self.assertEqual(
            outcome.result,
            {"role": "assistant", "content": {"type": "text", "text": "Hello!"}, "model": "human"},
        )

    def test_roots(self) -> None:
        """Roots are asked one per line: paths become file URIs, other URIs are refused."""
        question, outcome = self.ask(LIST_ROOTS, {})
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        typed = ["a", directory, "https://example.com", "file:///srv/project", ""]
        result = self.elicit(question.id, input="\n".join(typed) + "\n")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertIn("not a https: URI", result.stderr)
        self.assertEqual(
            outcome.result,
            {
                "roots": [
                    {"uri": Path(directory).resolve().as_uri()},
                    {"uri": "file:///srv/project"},
                ]
            },
        )

    def test_closed(self) -> None:
        """A question that is no longer pending is not shown as a form: exit 1, saying so."""
        question, _ = self.ask()
        self.broker.decline(question.id, by="client")
        result = self.elicit(question.id)
        self.assertEqual(result.exit_code, 1, result.output)
        self.assertIn("no longer pending: it was declined by client", result.stderr)

    def test_root_uri(self) -> None:
        """A path typed as a root becomes its absolute file URI; a file URI stays as it is."""
        self.assertEqual(root_uri("file:///a/b"), "file:///a/b")
        self.assertEqual(root_uri("/"), "file:///")
        self.assertEqual(root_uri("."), Path.cwd().resolve().as_uri())
        self.assertRaises(ValueError, root_uri, "ftp://host/x")


class NoDaemonTests(SynchronousTestCase):
    def test_not_running(self) -> None:
        """Without a daemon on the socket, the command says how to start one and exits 1."""
        state = tempfile.mkdtemp(prefix="mcpx-elicit-")
        self.addCleanup(shutil.rmtree, state)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
        env["MCPX_STATE_DIR"] = state
        result = CliRunner(env=env).invoke(main, ["elicit"])
        self.assertEqual(result.exit_code, 1, result.output)
        self.assertIn("no daemon is running", result.stderr)


class SocketTests(CommandRunner):
    """C{python -m mcpx elicit} against the real routes on the state directory's socket."""

    def setUp(self) -> None:
        super().setUp()
        self.broker = Broker(reactor)
        http = daemon_http(clock=reactor, pid=os.getpid(), broker=self.broker)
        port = reactor.listenUNIX(self.socket, Site(http.resource()))
        self.addCleanup(port.stopListening)
        self.addCleanup(self.broker.stop)

    async def test_list_and_answer(self) -> None:
        """A question is listed by `mcpx elicit --json`, and answered by its id."""
        question, answered = self.broker.ask(
            server="github", scope_key="", method=ELICIT, params=FORM
        )
        done = await self.mcpx("elicit", "--json")
        self.assertEqual(done.code, 0, done)
        self.assertEqual([q["id"] for q in done.json()["questions"]], [question.id])
        done = await self.mcpx("elicit", question.id, "--answer", '{"repo": "mcpx"}', "--json")
        self.assertEqual(done.code, 0, done)
        self.assertEqual(await answered, {"action": "accept", "content": {"repo": "mcpx"}})
        done = await self.mcpx("elicit")
        self.assertEqual((done.code, done.out), (0, "no questions are waiting\n"), done)

    async def test_interactive(self) -> None:
        """The interactive form reads its answers from standard input."""
        question, answered = self.broker.ask(
            server="github", scope_key="", method=ELICIT, params=FORM
        )
        done = await self.mcpx("elicit", question.id, stdin=b"a\nmcpx\ny\n")
        self.assertEqual(done.code, 0, done)
        self.assertEqual(
            await answered, {"action": "accept", "content": {"repo": "mcpx", "private": True}}
        )
