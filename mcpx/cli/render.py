# -*- test-case-name: tests.cli.test_render -*-
"""
What the commands print for a person (C{--json} prints the API's answer instead).

Every function here takes the API's JSON and returns text, except L{save_media} (which
writes a file) and L{ProgressBar} (which draws on a stream), so the formats are tested
without a daemon.  Fields are read defensively: a daemon of another version may add or
leave out fields, and the commands should still print what they can.
"""

from __future__ import annotations

import os
import time

from mcpx.cli import fastjson
from mcpx.cli.terminal import printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from pathlib import Path
    from typing import IO, Any

#: File name extensions for the media types tools commonly return; others are guessed.
_EXTENSIONS = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "image/svg+xml": ".svg",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/mpeg": ".mp3",
    "audio/ogg": ".ogg",
    "audio/webm": ".webm",
}


def json_text(value: object) -> str:
    """C{value} as indented JSON, the way every command's C{--json} shows an answer."""
    return fastjson.dumps(value, indent=2, ensure_ascii=False)


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """
    Left-aligned columns, two spaces apart, the last one unpadded; each cell
    L{printable} before the columns are measured, so that what the terminal shows lines up.
    """
    body = [list(headers), *([printable(str(cell)) for cell in row] for row in rows)]
    widths = [max(len(row[i]) for row in body) for i in range(len(headers) - 1)]
    lines = []
    for row in body:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines) + "\n"


def _text(value: object, default: str = "-") -> str:
    if value is None or value == "":
        return default
    return value if isinstance(value, str) else fastjson.dumps(value)


def first_line(text: object, limit: int = 80) -> str:
    """The first line of C{text}, cut to C{limit} characters."""
    line = _text(text, "").strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


#: The last error's width in C{mcpx servers}' table, and the most of it said beneath.
_LAST_ERROR_COLUMN = 60
_LAST_ERROR_SHOWN = 1000


def servers_text(answer: Mapping[str, Any]) -> str:
    """C{GET /v1/servers} as a table."""
    from mcpx.cli.hints import in_cli_words  # deferred, as in error_text

    servers = answer.get("servers") or []
    if not servers:
        return "No servers are configured (see `mcpx settings` for the config file).\n"
    rows = []
    # An error too long for its column is said in full beneath the table: the end of it
    # is what the upstream wrote on stderr as it died.
    in_full = []
    for server in servers:
        instances = server.get("instances")
        error = in_cli_words(first_line(server.get("last_error"), _LAST_ERROR_SHOWN))
        shown = first_line(error, _LAST_ERROR_COLUMN)
        if shown != error:
            in_full.append(f"{_text(server.get('name'))}: {error}\n")
        rows.append(
            (
                _text(server.get("name")),
                _text(server.get("state")),
                _text(server.get("transport")),
                _text(server.get("revision")),
                _text(instances if instances is not None else None),
                shown or "-",
            )
        )
    head = ("SERVER", "STATE", "TRANSPORT", "REVISION", "INSTANCES", "LAST ERROR")
    text = table(head, rows)
    if in_full:
        text += "\nLast errors in full:\n" + "".join(in_full)
    shadowed = [line for server in servers for line in _shadowed_lines(server)]
    if shadowed:
        text += "\nNot offered to hosts, shadowed in pass-through:\n" + "".join(shadowed)
    return text


def _shadowed_lines(server: Mapping[str, Any]) -> list[str]:
    """A server's names another pass-through server shadows, one line per kind and server."""
    groups: dict[tuple[str, str], list[str]] = {}
    entries = server.get("shadowed")
    reserved: dict[str, list[str]] = {}
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict) and entry.get("reserved") is True:
            reserved.setdefault(str(entry.get("kind")), []).append(_text(entry.get("name")))
        elif isinstance(entry, dict):
            key = (str(entry.get("kind")), str(entry.get("by")))
            groups.setdefault(key, []).append(str(entry.get("name")))
    name = _text(server.get("name"))
    lines = []
    for kind, names in reserved.items():
        plural = kind + ("s" if len(names) > 1 else "")
        remedy = (
            f'; give {name!r} a "toolPrefix" not starting with mcpx_ to offer them'
            if kind == "tool"
            else ""
        )
        lines.append(f"{name}: {plural} {', '.join(names)} (names reserved for mcpx{remedy})\n")
    for (kind, by), names in groups.items():
        remedy = (
            f'give {name!r} a "toolPrefix" in its server entry to offer both'
            if kind == "tool"
            else f"pass only one of them through to reach {name!r}'s"
        )
        plural = kind + ("s" if len(names) > 1 else "")
        lines.append(
            f"{name}: {plural} {', '.join(names)} (offered by {by!r}, passed through first; "
            f"{remedy})\n"
        )
    return lines


def tools_text(answer: Mapping[str, Any]) -> str:
    """C{GET /v1/tools} as a table: server, tool and what it does."""
    tools = answer.get("tools") or []
    if not tools:
        return "No tools found.\n"
    rows = [
        (
            _text(tool.get("server")),
            _text(tool.get("name")),
            first_line(tool.get("description") or tool.get("title")) or "-",
        )
        for tool in tools
    ]
    return table(("SERVER", "TOOL", "DESCRIPTION"), rows)


def _schema_type(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if isinstance(kind, str):
        if kind == "array" and isinstance(schema.get("items"), dict):
            return f"array of {_schema_type(schema['items'])}"
        return kind
    if "enum" in schema:
        return "one of " + ", ".join(fastjson.dumps(v) for v in schema["enum"])
    for combinator in ("anyOf", "oneOf"):
        options = schema.get(combinator)
        if isinstance(options, list):
            return "|".join(_schema_type(o) for o in options if isinstance(o, dict))
    return "any"


def _argument_lines(
    properties: Mapping[str, Any], required: Iterable[str], indent: str
) -> list[str]:
    """
    One entry per argument, its description in full, and the fields of an object (or
    of an array's objects) listed beneath it, indented, so that nothing of the schema a
    caller must know is left out.
    """
    needed = set(required)
    lines: list[str] = []
    for key, declared in properties.items():
        prop = declared if isinstance(declared, dict) else {}
        flag = "required" if key in needed else "optional"
        line = f"{indent}{key} ({_schema_type(prop)}, {flag})"
        if "default" in prop:
            line += f" [default: {fastjson.dumps(prop['default'])}]"
        description = str(prop.get("description") or "").strip()
        if description:
            first, *rest = description.splitlines()
            line += f": {first}"
            lines.append(line)
            lines += [f"{indent}    {more}".rstrip() for more in rest]
        else:
            lines.append(line)
        nested = prop
        if nested.get("type") == "array" and isinstance(nested.get("items"), dict):
            nested = nested["items"]
        fields = nested.get("properties")
        if isinstance(fields, dict) and fields:
            lines += _argument_lines(fields, nested.get("required") or (), indent + "    ")
    return lines


def describe_text(answer: Mapping[str, Any]) -> str:
    """C{GET /v1/tools/{server}/{tool}}: the tool in full, its arguments and how to call it."""
    server = _text(answer.get("server"))
    tool = answer.get("tool") or {}
    name = _text(tool.get("name"))
    lines = [f"{server} {name}" + (f" — {tool['title']}" if tool.get("title") else "")]
    if tool.get("description"):
        lines += ["", str(tool["description"]).rstrip()]
    schema = tool.get("inputSchema") or {}
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    lines += ["", "Arguments:" if properties else "Arguments: none"]
    lines += _argument_lines(properties, required, "  ")
    if tool.get("outputSchema"):
        lines += ["", "Structured output schema:", fastjson.dumps(tool["outputSchema"], indent=2)]
    annotations = tool.get("annotations") or {}
    hints = [key.removesuffix("Hint") for key, value in annotations.items() if value is True]
    if hints:
        # The server's own claims: mcpx passes them on, and its policy never relaxes on them.
        lines += ["", "Hints (as the server states them; unverified): " + ", ".join(hints)]
    example = " ".join(f"{key}=…" for key in properties if key in required)
    lines += ["", f"Call it: mcpx call {server} {name}" + (f" {example}" if example else "")]
    return "\n".join(lines) + "\n"


def _extension(mime_type: str) -> str:
    known = _EXTENSIONS.get(mime_type.lower())
    if known is not None:
        return known
    import mimetypes

    return mimetypes.guess_extension(mime_type) or ".bin"


def save_media(block: Mapping[str, Any], directory: Path, stem: str) -> Path:
    """
    Decode an image or audio block's base64 C{data} into a new file in C{directory}.

    @raise ValueError: the data is not base64.
    """
    import base64
    import binascii

    try:
        data = base64.b64decode(str(block.get("data", "")), validate=True)
    except binascii.Error as e:
        raise ValueError(f"the {block.get('type')} data is not valid base64: {e}") from None
    mime_type = str(block.get("mimeType") or "application/octet-stream")
    path = directory / f"{stem}{_extension(mime_type)}"
    # O_EXCL: never write through a file or link someone else put there.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return path


class MediaDirectory:
    """A temporary directory made the first time a tool returns a file to save."""

    def __init__(self, prefix: str = "mcpx-call-") -> None:
        self._prefix = prefix
        self._path: Path | None = None

    def get(self) -> Path:
        if self._path is None:
            import tempfile
            from pathlib import Path

            self._path = Path(tempfile.mkdtemp(prefix=self._prefix))
        return self._path


def _resource_summary(resource: Mapping[str, Any]) -> str:
    uri = _text(resource.get("uri"), "?")
    details = [str(resource["mimeType"])] if resource.get("mimeType") else []
    if isinstance(resource.get("text"), str):
        details.append(f"{len(resource['text'])} characters")
    elif isinstance(resource.get("blob"), str):
        details.append(f"about {len(resource['blob']) * 3 // 4} bytes")
    return uri + (f" ({', '.join(details)})" if details else "")


def content_text(
    result: Mapping[str, Any], media: MediaDirectory, stem: str = "content"
) -> list[str]:
    """
    A C{CallToolResult} as lines for a person: each content block once (text as it is,
    images and audio saved to files with the line naming the file, resources
    summarised), so that C{mcpx call … > out.txt} holds the text the tool returned.

    Structured content is the machine form of the same answer (servers repeat it in
    the content for clients that read only text), so it is printed, as indented JSON,
    only where the content does not already say it: in place of a text block that is
    its serialisation, or alone when there is no content.  A serialisation beside a
    text block that already holds its one value (C{{"result": 42}} beside C{42}), or a
    second serialisation, is left out.  C{--json} shows both.
    """
    out: list[str] = []
    structured = result.get("structuredContent")
    has_structured = "structuredContent" in result
    blocks = [block for block in result.get("content") or [] if isinstance(block, dict)]
    if not blocks and has_structured:
        return [fastjson.dumps(structured, indent=2, ensure_ascii=False)]
    texts = [str(block.get("text", "")) for block in blocks if block.get("type") == "text"]
    # The structured answer is said once: by a text block holding its one value as a
    # person reads it (C{42} for C{{"result": 42}}), else by its first serialisation.
    said_plainly = has_structured and any(_says_value(text, structured) for text in texts)
    structured_said = False
    for index, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            text = str(block.get("text", ""))
            if has_structured and _same_json(text, structured):
                if not (said_plainly or structured_said):
                    out.append(fastjson.dumps(structured, indent=2, ensure_ascii=False))
                structured_said = True
            else:
                out.append(text)
        elif kind in ("image", "audio"):
            mime_type = _text(block.get("mimeType"), "unknown type")
            try:
                path = save_media(block, media.get(), f"{stem}-{index + 1}")
            except (ValueError, OSError) as e:
                out.append(f"[{kind} {mime_type}: not saved: {e}]")
            else:
                size = path.stat().st_size
                out.append(f"[{kind} {mime_type}, {size} bytes, saved to {path}]")
        elif kind == "resource_link":
            name = block.get("title") or block.get("name")
            line = f"[resource link: {_resource_summary(block)}"
            if name:
                line += f" “{name}”"
            if block.get("description"):
                line += f": {first_line(block['description'])}"
            out.append(line + "]")
        elif kind == "resource":
            resource = block.get("resource")
            summary = _resource_summary(resource if isinstance(resource, dict) else {})
            out.append(f"[embedded resource: {summary}]")
        else:
            out.append(f"[{kind} content: {first_line(fastjson.dumps(block))}]")
    return out


def _says_value(text: str, structured: object) -> bool:
    """Whether C{text} is the one value of a single-field structured answer."""
    if not isinstance(structured, dict) or len(structured) != 1:
        return False
    [value] = structured.values()
    if isinstance(value, str):
        return text == value
    return not isinstance(value, dict | list) and _same_json(text, value)


def _same_json(text: str, value: object) -> bool:
    parsed = fastjson.try_loads(text)
    return parsed is not fastjson.NOT_JSON and bool(parsed == value)


def event_line(kind: str | None, data: Mapping[str, Any], received: float | None = None) -> str:
    """
    One event from C{/v1/events} on one line: time, kind, server, then the rest as
    C{key=value} (values that are not plain strings as JSON).
    """
    stamp = data.get("time", data.get("ts", received if received is not None else time.time()))
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        shown = (
            time.strftime("%H:%M:%S", time.localtime(stamp)) + f".{int(stamp * 1000) % 1000:03d}"
        )
    else:
        shown = str(stamp)
    kind = data.get("kind", kind) or "message"
    server = data.get("server")
    parts = [shown, str(kind)]
    if server:
        parts.append(str(server))
    for key, value in data.items():
        if key in ("time", "ts", "kind", "server"):
            continue
        if key == "retry_in" and isinstance(value, int | float) and not isinstance(value, bool):
            parts.append(f"retry_in={seconds_text(value)}")
            continue
        shown_value = value if isinstance(value, str) and value and " " not in value else None
        parts.append(f"{key}={shown_value if shown_value is not None else fastjson.dumps(value)}")
    return " ".join(parts)


def seconds_text(seconds: float) -> str:
    """
    A delay as a person reads it, rounded up as the daemon's own messages round it (one
    told "1s" must not find the server still waiting after a second): C{1s} for
    0.999968, tenths below ten seconds, whole seconds above.
    """
    import math  # deferred: a plain mcpx call shows no delay, and math is a library to load

    if seconds >= 10:
        return f"{math.ceil(seconds)}s"
    return f"{math.ceil(seconds * 10) / 10:g}s"


def error_text(error: Mapping[str, Any]) -> str:
    """
    An API error's message, with the upstream's JSON-RPC error when it carries one, and
    the routes it names as the commands that do the same (L{mcpx.cli.hints}).
    """
    # Deferred for start-up time: a plain mcpx call that goes well shows no error.
    from mcpx.cli.hints import in_cli_words

    message = in_cli_words(_text(error.get("message"), "the daemon reported an error"))
    rpc = error.get("rpc")
    if isinstance(rpc, dict):
        said = f"{rpc.get('code')}: {rpc.get('message')}"
        # The daemon's own message usually quotes the upstream's already: say it once.
        detail = "" if said in message else f"upstream error {said}"
        if "data" in rpc:
            data = f"data: {first_line(fastjson.dumps(rpc['data']), 200)}"
            detail = f"{detail} ({data})" if detail else f"upstream error {data}"
        if detail:
            message += f"\n  {detail}"
    retry = error.get("retry_in")
    # A message that already gives its next start (a server's last error) is not repeated.
    if isinstance(retry, int | float) and "next start in" not in message:
        message += f"\n  the daemon will retry in {seconds_text(retry)}"
    return message


class ProgressBar:
    """
    A one-line progress display on a stream (standard error), redrawn in place.

    With a total it draws a bar and a percentage; without one, the count so far.  The
    upstream's message follows either.
    """

    width = 30

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._drawn = 0

    def update(self, progress: Mapping[str, Any]) -> None:
        done = progress.get("progress")
        total = progress.get("total")
        message = progress.get("message")
        if not isinstance(done, int | float):
            return
        if isinstance(total, int | float) and total > 0:
            fraction = min(max(done / total, 0.0), 1.0)
            filled = round(fraction * self.width)
            line = (
                f"[{'#' * filled}{'.' * (self.width - filled)}] {fraction:4.0%} {done:g}/{total:g}"
            )
        else:
            line = f"[{done:g}]"
        if isinstance(message, str) and message:
            line += f" {first_line(message, 60)}"
        line = printable(line)
        # Pad over what the previous, possibly longer, line left behind.
        self._stream.write("\r" + line.ljust(self._drawn))
        self._stream.flush()
        self._drawn = len(line)

    def finish(self) -> None:
        """End the line, so what follows starts on a fresh one."""
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = 0
