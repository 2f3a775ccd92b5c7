# -*- test-case-name: tests.demo.test_demo -*-
"""
What the demo server offers: four tools, one prompt, one resource.

Each item is written once, as data, and shaped for a revision on request: a field that a
revision does not define (a tool's C{title} before 2025-06-18, C{structuredContent} before
2025-06-18, ...) is left out by asking L{mcpx.spec.matrix} rather than by comparing dates.

Nothing here schedules work or touches the outside world; the only input beyond the
arguments is the current time, which the caller reads from its clock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal

from attrs import frozen

from mcpx.spec.matrix import field_in
from mcpx.spec.revision import Revision

#: What a JSON value must be, as JSON Schema names it; only these two are needed.
ArgumentType = Literal["string", "number"]

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
    """

    name: str
    description: str
    type: ArgumentType = "string"
    required: bool = True

    def accepts(self, value: object) -> bool:
        if self.type == "string":
            return isinstance(value, str)
        # JSON has one number type; a boolean is not one, although Python says it is an int.
        return isinstance(value, int | float) and not isinstance(value, bool)


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
            "properties": {
                argument.name: {"type": argument.type, "description": argument.description}
                for argument in self.arguments
            },
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

    def call(self, arguments: Mapping[str, Any], now: float) -> ToolOutcome:
        """
        Run the tool.  Arguments that do not fit give an error result, not an exception:
        the specification asks for input validation errors to reach the model, so that it
        can correct itself.
        """
        try:
            check_arguments(arguments, self.arguments)
        except InvalidArguments as e:
            return ToolOutcome(f"Invalid arguments for tool {self.name!r}: {e}", is_error=True)
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
    "numbers), now (current UTC time), fail (always a tool error). Prompt: greet. "
    "Resource: demo://readme describes all of this. Nothing here has side effects."
)
