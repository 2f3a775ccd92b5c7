# -*- test-case-name: tests.demo.test_demo -*-
"""
What the demo server offers: six tools, one prompt, one resource.

Each item is written once, as data, and shaped for a revision on request: a field that a
revision does not define (a tool's C{title} before 2025-06-18, C{structuredContent} before
2025-06-18, ...) is left out by asking L{mcpx.spec.matrix} rather than by comparing dates.

Nothing here schedules work or touches the outside world; the only input beyond the
arguments is the current time, which the caller reads from its clock.  The two tools that
need more than that (C{countdown} waits and reports progress, C{ask} puts a question to the
user through the client) are described here with their pure parts (the final answer, the
question, what an answer means); L{mcpx.demo.server} does the waiting and the asking.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal

from attrs import frozen

from mcpx.spec.matrix import field_in
from mcpx.spec.revision import Revision

#: What a JSON value must be, as JSON Schema names it; only these three are needed.
ArgumentType = Literal["string", "number", "integer"]

_JSON_TYPE_NAMES: Final[Mapping[type, str]] = {
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    dict: "an object",
    list: "an array",
    type(None): "null",
}


class InvalidArguments(ValueError):
    """
    Arguments that do not fit a tool's or a prompt's declared inputs.

    The message is meant for the caller (and, for a tool, for the model reading the result).
    """


@frozen
class Argument:
    """
    One named input of a tool or a prompt.

    @ivar type: the JSON type a tool argument must have; prompt arguments are always strings.
    @ivar minimum: the least value a number may have, if any.
    @ivar maximum: the greatest value a number may have, if any.
    """

    name: str
    description: str
    type: ArgumentType = "string"
    required: bool = True
    minimum: float | None = None
    maximum: float | None = None

    def accepts(self, value: object) -> bool:
        if self.type == "string":
            return isinstance(value, str)
        # JSON has one number type; a boolean is not one, although Python says it is an int.
        if not isinstance(value, int | float) or isinstance(value, bool):
            return False
        # JSON Schema counts 3.0 as an integer: the JSON text may have been written either way.
        return self.type == "number" or float(value).is_integer()

    def out_of_range(self, value: float) -> str | None:
        """Why C{value} is outside the bounds, or C{None} when it is within them."""
        if self.minimum is not None and value < self.minimum:
            return f"argument {self.name!r} must be at least {self.minimum:g}, not {value:g}"
        if self.maximum is not None and value > self.maximum:
            return f"argument {self.name!r} must be at most {self.maximum:g}, not {value:g}"
        return None

    def schema(self) -> dict[str, Any]:
        """This argument as a JSON Schema property."""
        schema: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema


def check_arguments(
    arguments: Mapping[str, Any], declared: tuple[Argument, ...], *, closed: bool = True
) -> None:
    """
    Refuse C{arguments} that miss a required input, give one of the wrong type, or (when
    C{closed}) name one that is not declared.

    @raise InvalidArguments: naming every problem found, so one retry can fix them all.
    """
    problems: list[str] = []
    known = {argument.name for argument in declared}
    if closed:
        unexpected = sorted(name for name in arguments if name not in known)
        if unexpected:
            problems.append("unexpected argument(s): " + ", ".join(repr(n) for n in unexpected))
    for argument in declared:
        if argument.name not in arguments:
            if argument.required:
                problems.append(f"missing required argument {argument.name!r}")
            continue
        value = arguments[argument.name]
        if not argument.accepts(value):
            given = _JSON_TYPE_NAMES.get(type(value), "another kind of value")
            problems.append(
                f"argument {argument.name!r} must be {_with_article(argument.type)}, not {given}"
            )
        elif argument.type != "string":
            problem = argument.out_of_range(value)
            if problem is not None:
                problems.append(problem)
    if problems:
        raise InvalidArguments("; ".join(problems))


def _with_article(type_name: str) -> str:
    return f"an {type_name}" if type_name[0] in "aeiou" else f"a {type_name}"


@frozen
class ToolOutcome:
    """
    What a tool produced, before it is shaped for a revision.

    @ivar text: the text content block every revision gets.
    @ivar structured: the structured result, sent only where the revision has
        C{structuredContent}; C{text} then carries the same value serialised, as the
        specification recommends for clients that read only content.
    @ivar is_error: the tool ran and failed; the model should see why.
    """

    text: str
    structured: dict[str, Any] | None = None
    is_error: bool = False

    def to_json(self, revision: Revision) -> dict[str, Any]:
        """The C{CallToolResult} fields for C{revision} (no C{resultType} or C{_meta})."""
        result: dict[str, Any] = {"content": [{"type": "text", "text": self.text}]}
        if self.structured is not None and field_in("CallToolResult.structuredContent", revision):
            result["structuredContent"] = self.structured
        if self.is_error:
            result["isError"] = True
        return result


#: Runs a tool on arguments already checked against its inputs, at a time in POSIX seconds.
ToolBody = Callable[[Mapping[str, Any], float], ToolOutcome]


@frozen
class DemoTool:
    """
    One tool: how it is described to clients, and what it does.

    @ivar output_schema: the schema of C{structuredContent}, for tools that produce it.
    @ivar idempotent: calling it twice with the same arguments gives the same result.
    """

    name: str
    title: str
    description: str
    arguments: tuple[Argument, ...]
    body: ToolBody
    output_schema: dict[str, Any] | None = None
    idempotent: bool = True

    def input_schema(self) -> dict[str, Any]:
        required = [argument.name for argument in self.arguments if argument.required]
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {argument.name: argument.schema() for argument in self.arguments},
            "additionalProperties": False,
        }
        if required:
            schema["required"] = required
        return schema

    def to_json(self, revision: Revision) -> dict[str, Any]:
        """This tool as a C{tools/list} entry for C{revision}."""
        tool: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema(),
        }
        if field_in("Tool.title", revision):
            tool["title"] = self.title
        if self.output_schema is not None and field_in("Tool.outputSchema", revision):
            tool["outputSchema"] = self.output_schema
        if field_in("Tool.annotations", revision):
            tool["annotations"] = {
                "readOnlyHint": True,
                "idempotentHint": self.idempotent,
                "openWorldHint": False,
            }
        return tool

    def refusal(self, arguments: Mapping[str, Any]) -> ToolOutcome | None:
        """
        The error result for arguments that do not fit, or C{None} when they do.  An error
        result rather than an exception: the specification asks for input validation errors
        to reach the model, so that it can correct itself.
        """
        try:
            check_arguments(arguments, self.arguments)
        except InvalidArguments as e:
            return ToolOutcome(f"Invalid arguments for tool {self.name!r}: {e}", is_error=True)
        return None

    def call(self, arguments: Mapping[str, Any], now: float) -> ToolOutcome:
        """Run the tool (see L{refusal} for arguments that do not fit)."""
        refused = self.refusal(arguments)
        if refused is not None:
            return refused
        return self.body(arguments, now)


def _echo(arguments: Mapping[str, Any], now: float) -> ToolOutcome:
    return ToolOutcome(arguments["text"])


def _add(arguments: Mapping[str, Any], now: float) -> ToolOutcome:
    total = arguments["a"] + arguments["b"]
    if isinstance(total, float) and not math.isfinite(total):
        # JSON cannot carry an infinity; say so instead of failing to encode the answer.
        return ToolOutcome("The sum is too large to represent as a JSON number.", is_error=True)
    structured = {"sum": total}
    return ToolOutcome(json.dumps(structured), structured)


def format_time(seconds: float) -> str:
    """C{seconds} since the POSIX epoch as ISO 8601 UTC text with milliseconds."""
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _now(arguments: Mapping[str, Any], now: float) -> ToolOutcome:
    return ToolOutcome(format_time(now))


_DEFAULT_FAILURE: Final = "The fail tool always fails; this is what a tool error looks like."


def _fail(arguments: Mapping[str, Any], now: float) -> ToolOutcome:
    return ToolOutcome(arguments.get("message", _DEFAULT_FAILURE), is_error=True)


#: How long C{countdown} waits between steps when not told, in seconds.
DEFAULT_INTERVAL: Final = 1.0


def countdown_plan(arguments: Mapping[str, Any]) -> tuple[int, float]:
    """The number of steps and the seconds between them, from checked arguments."""
    return int(arguments["steps"]), float(arguments.get("interval", DEFAULT_INTERVAL))


def countdown_progress(step: int, steps: int) -> str:
    """The message of the progress report after C{step} of C{steps}."""
    left = steps - step
    return f"{left} to go" if left else "lift-off"


def _countdown(arguments: Mapping[str, Any], now: float) -> ToolOutcome:
    steps, interval = countdown_plan(arguments)
    return ToolOutcome(f"Lift-off after {steps} step(s), {interval:g}s apart.")


#: The key of the one entry in C{ask}'s C{inputRequests} (2026-07-28).
ASK_KEY: Final = "answer"
DEFAULT_QUESTION: Final = "What should I call you?"

CANNOT_ASK: Final = ToolOutcome(
    "Cannot ask: this client did not declare that it supports elicitation (form mode), "
    "so the ask tool has no way to put a question to the user.",
    is_error=True,
)


def ask_question(arguments: Mapping[str, Any]) -> str:
    return str(arguments.get("question", DEFAULT_QUESTION))


def ask_request(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """
    The params of the C{elicitation/create} request that puts the question: a form with a
    single required text field.  Form mode is what the absence of C{mode} means in every
    revision that has elicitation, so the request needs no per-revision spelling.
    """
    return {
        "message": ask_question(arguments),
        "requestedSchema": {
            "type": "object",
            "properties": {
                ASK_KEY: {"type": "string", "title": "Answer", "description": "Your answer."}
            },
            "required": [ASK_KEY],
        },
    }


def ask_state(arguments: Mapping[str, Any]) -> str:
    """
    The C{requestState} of C{ask}'s C{input_required} result (2026-07-28).

    It binds the retry to the question asked, so an answer to another question is not
    taken for this one.  Nothing secret or costly depends on it, so it needs no signature;
    a server whose state mattered would have to protect it, as the clients control it.
    """
    digest = hashlib.sha256(ask_question(arguments).encode("utf-8")).hexdigest()
    return f"ask/1:{digest[:32]}"


def ask_outcome(result: object) -> ToolOutcome:
    """What the user's C{ElicitResult} means, as the tool's result."""
    if not isinstance(result, Mapping):
        return ToolOutcome("The client's answer to the question was not an object.", is_error=True)
    action = result.get("action")
    if action == "accept":
        content = result.get("content")
        answer = content.get(ASK_KEY) if isinstance(content, Mapping) else None
        if not isinstance(answer, str):
            return ToolOutcome(
                "The client accepted the question but sent no answer.", is_error=True
            )
        return ToolOutcome(f"The user answered: {answer}")
    if action == "decline":
        return ToolOutcome("The user declined to answer.")
    if action == "cancel":
        return ToolOutcome("The user dismissed the question without answering.")
    return ToolOutcome(f"The client answered with an unknown action: {action!r}.", is_error=True)


def _ask_unreachable(arguments: Mapping[str, Any], now: float) -> ToolOutcome:
    # Only reached by a caller that runs ask without a client to ask.
    return CANNOT_ASK


TOOLS: Final[tuple[DemoTool, ...]] = (
    DemoTool(
        name="echo",
        title="Echo",
        description="Returns the given text unchanged.",
        arguments=(Argument("text", "The text to send back."),),
        body=_echo,
    ),
    DemoTool(
        name="add",
        title="Add two numbers",
        description="Adds two numbers and returns their sum.",
        arguments=(
            Argument("a", "The first number.", "number"),
            Argument("b", "The second number.", "number"),
        ),
        body=_add,
        output_schema={
            "type": "object",
            "properties": {"sum": {"type": "number", "description": "a + b"}},
            "required": ["sum"],
            "additionalProperties": False,
        },
    ),
    DemoTool(
        name="now",
        title="Current time",
        description="Returns the current time in UTC as ISO 8601 text.",
        arguments=(),
        body=_now,
        idempotent=False,
    ),
    DemoTool(
        name="fail",
        title="Always fail",
        description=(
            "Always returns a tool error (isError), to show how clients report one. "
            "The optional message becomes the error text."
        ),
        arguments=(Argument("message", "The error text to return.", required=False),),
        body=_fail,
    ),
    DemoTool(
        name="countdown",
        title="Count down",
        description=(
            "Counts down the given number of steps, interval seconds apart, reporting "
            "progress after each step when the request asks for it (a progressToken), "
            "then returns."
        ),
        arguments=(
            Argument("steps", "How many steps to count down.", "integer", minimum=1, maximum=100),
            Argument(
                "interval",
                f"Seconds between steps (default {DEFAULT_INTERVAL:g}).",
                "number",
                required=False,
                minimum=0,
                maximum=10,
            ),
        ),
        body=_countdown,
    ),
    DemoTool(
        name="ask",
        title="Ask the user",
        description=(
            "Asks the user a question through the client (elicitation) and returns the "
            "answer. Needs a client that supports elicitation in form mode."
        ),
        arguments=(
            Argument("question", f"What to ask (default: {DEFAULT_QUESTION!r}).", required=False),
        ),
        body=_ask_unreachable,
        idempotent=False,
    ),
)


@frozen
class DemoPrompt:
    """One prompt template and the single user message it produces."""

    name: str
    title: str
    description: str
    arguments: tuple[Argument, ...]
    template: str

    def to_json(self, revision: Revision) -> dict[str, Any]:
        """This prompt as a C{prompts/list} entry for C{revision}."""
        prompt: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "arguments": [
                {
                    "name": argument.name,
                    "description": argument.description,
                    "required": argument.required,
                }
                for argument in self.arguments
            ],
        }
        if field_in("Prompt.title", revision):
            prompt["title"] = self.title
        return prompt

    def render(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """
        The C{GetPromptResult} fields (the same in every revision).

        @raise InvalidArguments: a required argument is missing or not a string.  Prompt
            arguments are not closed: a client may pass more than a prompt uses.
        """
        check_arguments(arguments, self.arguments, closed=False)
        text = self.template.format_map({a.name: arguments[a.name] for a in self.arguments})
        return {
            "description": self.description,
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        }


PROMPTS: Final[tuple[DemoPrompt, ...]] = (
    DemoPrompt(
        name="greet",
        title="Greet someone",
        description="Asks the model to greet someone by name.",
        arguments=(Argument("name", "Who to greet."),),
        template="Please write a short, friendly greeting for {name}.",
    ),
)


@frozen
class DemoResource:
    """One static text resource."""

    uri: str
    name: str
    title: str
    description: str
    mime_type: str
    text: str

    def to_json(self, revision: Revision) -> dict[str, Any]:
        """This resource as a C{resources/list} entry for C{revision}."""
        resource: dict[str, Any] = {
            "uri": self.uri,
            "name": self.name,
            "description": self.description,
            "mimeType": self.mime_type,
        }
        if field_in("Resource.title", revision):
            resource["title"] = self.title
        return resource

    def contents(self) -> dict[str, Any]:
        """The C{TextResourceContents} entry of a C{resources/read} result."""
        return {"uri": self.uri, "mimeType": self.mime_type, "text": self.text}


_README: Final = """\
# The mcpx demo server

This server ships with mcpx so that a fresh installation has something to talk to.
It runs as `python -m mcpx.demo` and speaks MCP over stdio, in every revision mcpx
supports: 2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25 after an `initialize`
handshake, and 2026-07-28 on any request that names it in `_meta`.

## Tools

- `echo` returns the `text` it is given.
- `add` adds the numbers `a` and `b`; where the revision allows it, the sum also comes
  back as structured content (`{"sum": ...}`).
- `now` tells the current time in UTC.
- `fail` always answers with a tool error, to show what one looks like.
- `countdown` counts down `steps` steps, `interval` seconds apart, and reports its
  progress when the request carries a `progressToken`.
- `ask` puts a `question` to the user through the client (elicitation): a request to
  the client in 2025-06-18 and 2025-11-25, an `input_required` result in 2026-07-28.
  A client that declared no elicitation gets a tool error saying so.

## Prompts

- `greet` asks the model to greet `name`.

## Resources

- `demo://readme` is this document.

Nothing here changes while the server runs, and nothing touches the network or the disk.
"""

README: Final = DemoResource(
    uri="demo://readme",
    name="readme",
    title="About the mcpx demo server",
    description="What the demo server offers and how to try it.",
    mime_type="text/markdown",
    text=_README,
)

RESOURCES: Final[tuple[DemoResource, ...]] = (README,)

INSTRUCTIONS: Final = (
    "A demonstration server bundled with mcpx. Tools: echo (returns text), add (sums two "
    "numbers), now (current UTC time), fail (always a tool error), countdown (reports "
    "progress), ask (asks the user a question). Prompt: greet. "
    "Resource: demo://readme describes all of this. Nothing here has side effects."
)
