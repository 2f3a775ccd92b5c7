# -*- test-case-name: tests.cli.test_elicit -*-
"""
C{mcpx elicit}: the questions upstream servers asked, and answering one of them.

An upstream server may ask for input in the middle of a call: an elicitation (a form to
fill in, or a URL to open), a sampling request (a reply a model would write) or a request
for the client's roots.  A question mcpx could not put to the calling client waits in the
daemon's broker until someone answers it, or until its deadline.  This command lists those
questions and answers them, through C{/v1/questions}:

  - C{mcpx elicit}: the pending questions (C{--all}: every one still kept);
  - C{mcpx elicit ID}: show the question and answer it interactively: a form built from
    the elicitation's C{requestedSchema} (checked before it is sent), the URL to open, the
    conversation to reply to, or the roots to offer;
  - C{mcpx elicit ID --answer JSON}: answer without asking anything (C{-} reads the answer
    from standard input); C{--decline} and C{--cancel} refuse it.  C{--json} only chooses
    the output: the API's JSON instead of text.

Like the other commands it talks to the daemon over its unix socket and exits with the
statuses L{mcpx.cli.commands} documents.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from mcpx.cli.client import DaemonClient, ensure_running, target
from mcpx.cli.connect import connect as connect_daemon
from mcpx.cli.failures import CommandFailed, ask
from mcpx.cli.render import first_line, json_text, table
from mcpx.cli.terminal import echo, printable
from mcpx.ops import routes

if TYPE_CHECKING:
    # Imported where a form is filled in: jsonschema is not needed to list questions.
    from mcpx.questions.forms import FormField

#: Who answers, as the daemon records it.
ANSWERER = "cli"

#: The words a person may type to choose what to do with a question, and what each means.
_DECISIONS = {
    "a": "accept",
    "accept": "accept",
    "y": "accept",
    "yes": "accept",
    "d": "decline",
    "decline": "decline",
    "c": "cancel",
    "cancel": "cancel",
}

_EPILOG = """\
\b
Examples:
  mcpx elicit                              the pending questions
  mcpx elicit q_4f1c2a9b0d3e5f67           answer one, interactively
  mcpx elicit q_4f1c2a9b0d3e5f67 --answer '{"repo": "mcpx"}'
  mcpx elicit q_4f1c2a9b0d3e5f67 --decline

\b
With --answer JSON, an elicitation's answer is its content (the form's values)
and a sampling or roots question's is the whole result. --json prints the list,
the question, or the answered question as the API's JSON.

\b
Exit status: 0 done; 1 the question is no longer pending, or no daemon runs;
2 bad arguments, or the daemon refused the answer as invalid; 3 no such question.
"""


def connect() -> DaemonClient:
    """The client of the daemon the environment names (the tests put their own in)."""
    return connect_daemon()


@click.command("elicit", epilog=_EPILOG)
# Any number of words, so that the old `ID --json ANSWER` gets a sentence, not click's
# "unexpected extra argument".
@click.argument("words", metavar="[ID]", nargs=-1)
@click.option(
    "--answer",
    "answer_text",
    default=None,
    metavar="JSON",
    help="Answer ID with this JSON object (- reads it from stdin).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
@click.option("--decline", is_flag=True, help="Decline question ID.")
@click.option("--cancel", is_flag=True, help="Cancel question ID (dismiss it without choosing).")
@click.option("--all", "everything", is_flag=True, help="List finished questions too.")
@click.option(
    "--start", is_flag=True, help="Start a daemon in the background first if none is running."
)
def elicit(
    *,
    words: tuple[str, ...],
    answer_text: str | None,
    as_json: bool,
    decline: bool,
    cancel: bool,
    everything: bool,
    start: bool,
) -> None:
    """List the questions upstream servers asked, or answer question ID."""
    question_id = _question_id(words, as_json)
    if decline and cancel:
        raise click.UsageError("--decline and --cancel cannot be combined")
    if (decline or cancel) and answer_text is not None:
        raise click.UsageError("an answer (--answer JSON) cannot be declined or cancelled too")
    if question_id is None and (decline or cancel or answer_text is not None):
        raise click.UsageError(
            "name the question to answer: mcpx elicit ID ...; `mcpx elicit` lists them"
        )
    if question_id is not None and everything:
        raise click.UsageError("--all is for listing; it takes no ID")
    answer = _parse_answer(answer_text) if answer_text is not None else None
    client = connect()

    def work() -> None:
        if start:
            ensure_running(client, echo)
        if question_id is None:
            list_questions(client, as_json, everything=everything)
        elif decline or cancel:
            refuse(client, question_id, "decline" if decline else "cancel", as_json)
        elif answer is not None:
            answer_with(client, question_id, answer, as_json)
        elif as_json:
            echo(json_text(client.get(_question_path(question_id))))
        else:
            answer_interactively(client, question_id)

    ask(client, as_json, work, echo)


def _question_id(words: tuple[str, ...], as_json: bool) -> str | None:
    """The one ID among the words, refusing the old C{--json ANSWER} in so many words."""
    if len(words) <= 1:
        return words[0] if words else None
    if as_json and any(_looks_like_json(word) for word in words[1:]):
        raise click.UsageError(
            "--json only chooses the output now; give the answer with --answer: "
            f"mcpx elicit {words[0]} --answer '...'"
        )
    raise click.UsageError(f"one question ID at most, not {len(words)}: {' '.join(words)}")


def _looks_like_json(text: str) -> bool:
    return text == "-" or text.lstrip().startswith(("{", "[", '"'))


def _parse_answer(text: str) -> dict[str, Any]:
    raw = sys.stdin.read() if text == "-" else text
    try:
        answer = json.loads(raw)
    except ValueError as e:
        raise click.UsageError(f"--answer: the answer is not JSON ({e})") from None
    if not isinstance(answer, dict):
        raise click.UsageError(
            f"--answer: the answer must be a JSON object, not {type(answer).__name__}"
        )
    return answer


def _question_path(question_id: str) -> str:
    return routes.path("get_question", id=question_id)


def _send(client: DaemonClient, question_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    answered: dict[str, Any] = client.post(
        _question_path(question_id) + "/answer", {**body, "by": ANSWERER}
    )
    return answered


# -- Listing -------------------------------------------------------------------------------


def list_questions(client: DaemonClient, as_json: bool, *, everything: bool) -> None:
    """Print the pending questions (every kept one with C{everything})."""
    answer = client.get(target(routes.path("list_questions"), all="true" if everything else None))
    if as_json:
        echo(json_text(answer))
        return
    echo(questions_text(answer, time.time(), everything=everything), nl=False)


def questions_text(answer: Mapping[str, Any], now: float, *, everything: bool = False) -> str:
    """The list of questions as a table, for a person."""
    questions = answer.get("questions")
    if not isinstance(questions, list) or not questions:
        return "no questions are kept\n" if everything else "no questions are waiting\n"
    last = "STATE" if everything else "EXPIRES"
    rows = []
    for question in questions:
        if not isinstance(question, dict):
            continue
        if everything:
            when = str(question.get("state", "?"))
        else:
            when = "in " + _duration(_number(question.get("deadline"), now) - now)
        rows.append(
            (
                str(question.get("id", "?")),
                str(question.get("server", "?")),
                str(question.get("kind", "?")),
                _duration(now - _number(question.get("created"), now)),
                when,
                summary(question),
            )
        )
    return table(("ID", "SERVER", "KIND", "AGE", last, "QUESTION"), rows)


def _number(value: object, fallback: float) -> float:
    return float(value) if isinstance(value, int | float) else fallback


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def summary(question: Mapping[str, Any]) -> str:
    """One line saying what a question asks."""
    params = question.get("params")
    params = params if isinstance(params, dict) else {}
    kind = question.get("kind")
    if kind == "sampling":
        messages = params.get("messages")
        said = ""
        if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
            said = " ".join(_content_lines(messages[-1].get("content")))
        text = f"a reply to: {first_line(said, 60)}" if said else "a reply"
    elif kind == "roots":
        text = "the roots (directories) it may work in"
    else:
        text = first_line(params.get("message"), 80) or "(no message)"
        if params.get("mode") == "url":
            text += " [url]"
    if question.get("orphaned"):
        text = "[orphaned] " + text
    return text


# -- Answering without asking --------------------------------------------------------------


def refuse(client: DaemonClient, question_id: str, action: str, as_json: bool) -> None:
    """Decline or cancel a question."""
    _report(_send(client, question_id, {"action": action}), as_json)


def answer_with(
    client: DaemonClient, question_id: str, answer: dict[str, Any], as_json: bool
) -> None:
    """
    Accept a question with C{answer}: an elicitation's content, or the whole result of a
    sampling or roots question.  Which it is is the question's kind, so it is read first.
    """
    question = client.get(_question_path(question_id))
    _report(_send(client, question_id, _accepting(question, answer)), as_json)


def _accepting(question: Mapping[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    if question.get("kind") != "elicitation":
        return {"action": "accept", "result": answer}
    params = question.get("params")
    if isinstance(params, dict) and params.get("mode") == "url" and not answer:
        # A URL elicitation is accepted without content; {} says "accept".
        return {"action": "accept"}
    return {"action": "accept", "content": answer}


def _report(question: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        echo(json_text(question))
        return
    state = question.get("state", "answered")
    server = question.get("server", "?")
    told = {
        "answered": f"{server} has the answer",
        "declined": f"{server} was told it was declined",
        "cancelled": f"{server} was told it was cancelled",
    }.get(str(state), f"{server} was told")
    echo(f"{question.get('id', '?')}: {state}; {told}")


# -- Answering interactively ---------------------------------------------------------------


def answer_interactively(client: DaemonClient, question_id: str) -> None:
    """Show the question, ask for the answer in a way that suits it, and send it."""
    question = client.get(_question_path(question_id))
    if question.get("state") != "pending":
        raise CommandFailed(
            f"question {question_id} is no longer pending: it was {question.get('state')}"
            + (f" by {question['answered_by']}" if question.get("answered_by") else "")
        )
    show_question(question, time.time())
    params = question.get("params")
    params = params if isinstance(params, dict) else {}
    kind = question.get("kind")
    if kind == "sampling":
        body = _ask_sampling(params)
    elif kind == "roots":
        body = _ask_roots()
    elif params.get("mode") == "url":
        body = _ask_url(params)
    else:
        body = _ask_form(params)
    _report(_send(client, question_id, body), as_json=False)


def show_question(question: Mapping[str, Any], now: float) -> None:
    """What is asked, by whom, and how long is left to answer."""
    created = _number(question.get("created"), now)
    deadline = _number(question.get("deadline"), now)
    echo(
        f"{question.get('server', '?')} asks ({question.get('kind', '?')}, "
        f"{question.get('id', '?')}; asked {_duration(now - created)} ago, "
        f"expires in {_duration(deadline - now)})"
    )
    if question.get("orphaned"):
        echo(
            "note: it was asked before the daemon restarted; nothing upstream waits for "
            "the answer any more"
        )
    params = question.get("params")
    params = params if isinstance(params, dict) else {}
    if question.get("kind") == "elicitation" and isinstance(params.get("message"), str):
        echo(params["message"])


def _decide(verb: str) -> str:
    """accept, decline or cancel, as the person chooses; accept by default."""
    while True:
        text = click.prompt(f"{verb} (a), decline (d) or cancel (c)?", default="a")
        decision = _DECISIONS.get(text.strip().lower())
        if decision is not None:
            return decision
        echo("answer a, d or c", err=True)


def _ask_url(params: Mapping[str, Any]) -> dict[str, Any]:
    echo(f"URL: {params.get('url', '(none given)')}")
    return {"action": _decide("Open it and accept")}


def _ask_form(params: Mapping[str, Any]) -> dict[str, Any]:
    # Deferred for start-up time: jsonschema, as above.
    from mcpx.questions.forms import check_content, fields

    schema = params.get("requestedSchema")
    schema = schema if isinstance(schema, dict) else {}
    try:
        form = fields(schema)
    except ValueError as e:
        raise CommandFailed(
            f"the form cannot be shown ({e}); decline it with --decline, "
            "or answer it with --answer JSON"
        ) from None
    decision = _decide("Fill in the form")
    if decision != "accept":
        return {"action": decision}
    while True:
        content = fill_form(form)
        reason = check_content(schema, content)
        if reason is None:
            return {"action": "accept", "content": content}
        echo(f"{reason}; fill in the form again", err=True)


#: A field left empty that has no default and is not required: it is left out.
_LEFT_OUT = object()


def fill_form(form: Sequence[FormField]) -> dict[str, Any]:
    """Ask for each field in turn; a field's value is checked as soon as it is typed."""
    content: dict[str, Any] = {}
    for field in form:
        value = _ask_field(field)
        if value is not _LEFT_OUT:
            content[field.name] = value
    return content


def _ask_field(field: FormField) -> Any:
    # Deferred for start-up time: jsonschema, as above.
    from mcpx.questions.forms import coerce

    echo("")
    if field.description:
        echo(field.description)
    for number, (value, title) in enumerate(field.choices, 1):
        echo(f"  {number}) {title}" + ("" if title == value else f" [{value}]"))
    # The name too when a title hides it: the reasons for refusing a value use the name.
    notes = [field.name] if field.label != field.name else []
    if field.required:
        notes.append("required")
    hint = _hint(field)
    if hint:
        notes.append(hint)
    prompt = field.label + (f" ({'; '.join(notes)})" if notes else "")
    if field.default is not None:
        prompt += f" [{_default_text(field)}]"
    while True:
        text = click.prompt(printable(prompt), default="", show_default=False)
        if not text.strip():
            if field.default is not None:
                return field.default
            if not field.required:
                return _LEFT_OUT
            echo(f"{field.name}: a value is required", err=True)
            continue
        try:
            return coerce(field, text)
        except ValueError as e:
            echo(str(e), err=True)


def _hint(field: FormField) -> str:
    """How to type the value, when it is not plain text."""
    if field.multiple:
        return "numbers or values, separated by commas"
    if field.choices:
        return "a number or a value"
    if field.type == "boolean":
        return "y/n"
    if field.type in ("number", "integer"):
        word = "a whole number" if field.type == "integer" else "a number"
        if field.minimum is not None and field.maximum is not None:
            return f"{word} from {field.minimum:g} to {field.maximum:g}"
        if field.minimum is not None:
            return f"{word}, at least {field.minimum:g}"
        if field.maximum is not None:
            return f"{word}, at most {field.maximum:g}"
        return word
    if field.format:
        return {"date": "YYYY-MM-DD", "date-time": "YYYY-MM-DDTHH:MM:SSZ"}.get(
            field.format, field.format
        )
    return ""


def _default_text(field: FormField) -> str:
    default = field.default
    if isinstance(default, bool):
        return "y" if default else "n"
    titles = dict(field.choices)
    if isinstance(default, list):
        return ", ".join(titles.get(str(item), str(item)) for item in default)
    if isinstance(default, str):
        return titles.get(default, default)
    return json.dumps(default)


def _content_lines(content: Any) -> list[str]:
    """A sampling message's content as lines of text (a block or a list of them)."""
    blocks = content if isinstance(content, list) else [content]
    lines: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            lines.append(block["text"])
        else:
            described = " ".join(
                str(part) for part in (block.get("type"), block.get("mimeType")) if part
            )
            lines.append(f"[{described or 'content'}]")
    return lines


def _ask_sampling(params: Mapping[str, Any]) -> dict[str, Any]:
    """Show the conversation and ask for the reply a model would have written."""
    if isinstance(params.get("systemPrompt"), str):
        echo(f"system prompt: {params['systemPrompt']}")
    messages = params.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict):
            for line in _content_lines(message.get("content")):
                echo(f"[{message.get('role', '?')}] {line}")
    if isinstance(params.get("maxTokens"), int):
        echo(f"(a reply of at most {params['maxTokens']} tokens is asked for)")
    decision = _decide("Reply")
    if decision != "accept":
        return {"action": decision}
    while True:
        text = click.prompt("Reply", default="", show_default=False)
        if text.strip():
            break
        echo("type the reply, or press Ctrl-C to leave the question pending", err=True)
    return {
        "action": "accept",
        "result": {
            "role": "assistant",
            "content": {"type": "text", "text": text},
            "model": "human",
        },
    }


def _ask_roots() -> dict[str, Any]:
    """Ask for the roots to offer: file URIs or paths, one per line, until an empty line."""
    decision = _decide("Offer roots")
    if decision != "accept":
        return {"action": decision}
    echo("One root per line, as a file:// URI or a path; an empty line ends the list.")
    roots: list[dict[str, Any]] = []
    while True:
        text = click.prompt("root", default="", show_default=False).strip()
        if not text:
            return {"action": "accept", "result": {"roots": roots}}
        try:
            roots.append({"uri": root_uri(text)})
        except ValueError as e:
            echo(str(e), err=True)


def root_uri(text: str) -> str:
    """
    A root's C{file://} URI: as typed when it is one, else the URI of the path typed.

    @raise ValueError: a URI of another scheme; roots are files.
    """
    if text.startswith("file://"):
        return text
    scheme, colon, _ = text.partition(":")
    if colon and scheme.isalpha() and len(scheme) > 1:
        raise ValueError(f"{text}: a root is a file:// URI or a path, not a {scheme}: URI")
    return Path(text).expanduser().resolve().as_uri()
