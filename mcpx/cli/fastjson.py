# -*- test-case-name: tests.cli.test_fastjson -*-
"""
JSON for C{mcpx call}'s fast path without importing the C{json} package.

C{json}'s decoder imports C{re}, and C{re} imports C{enum} and compiles patterns: together
about two thirds of what a plain C{mcpx call} executes above the bare interpreter.  What
the fast path needs of JSON, the standard library's C accelerator C{_json} (the one the
C{json} package itself runs on) does alone: L{loads} and L{dumps} call it as C{json.loads}
and C{json.dumps} do and give the same results.  Whatever it does not cover (indenting,
bytes in another encoding than UTF-8, a refusal's message) goes to C{json} itself, imported
then: the answers are the same, only slower.
"""

from __future__ import annotations

import _json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: What JSON allows between tokens (C{json.decoder.WHITESPACE}).
_SPACE = " \t\n\r"


class _Decoding:
    """What C{_json.make_scanner} reads of a decoder: C{json.JSONDecoder()}'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo: dict[str, str] = {}

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


# typeshed types the argument as a JSONDecoder; the scanner reads only these attributes.
_scan = _json.make_scanner(_Decoding())  # type: ignore[arg-type]


class _NotJson:
    def __repr__(self) -> str:
        return "<not JSON>"


#: What L{try_loads} returns for text that is not one JSON document.
NOT_JSON = _NotJson()


def try_loads(text: str) -> Any:
    """C{json.loads(text)}, or L{NOT_JSON} where that would raise C{ValueError}."""
    if text.startswith("\ufeff"):
        return NOT_JSON
    start = len(text) - len(text.lstrip(_SPACE))
    try:
        value, end = _scan(text, start)
    except (StopIteration, ValueError):
        return NOT_JSON
    except SystemError:
        # The scanner raises json.decoder's JSONDecodeError only once that module is
        # loaded, and fails without an exception before: load it, and scan again.
        import json.decoder  # noqa: F401

        return try_loads(text)
    if end != len(text) and text[end:].strip(_SPACE):
        return NOT_JSON
    return value


def loads(data: str | bytes | bytearray) -> Any:
    """
    C{json.loads(data)}.

    @raise ValueError: C{json}'s own C{JSONDecodeError}, with its message.
    """
    if isinstance(data, bytes | bytearray):
        # json detects UTF-16 and UTF-32 by their zero bytes, and a UTF-8 BOM: its way.
        if data.startswith(b"\xef\xbb\xbf") or b"\x00" in data[:4]:
            return _json_loads(data)
        try:
            text = data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return _json_loads(data)
    else:
        text = data
    value = try_loads(text)
    if value is NOT_JSON:
        return _json_loads(text)
    return value


def _json_loads(data: str | bytes | bytearray) -> Any:
    import json  # deferred: only for what this module does not cover (see above)

    return json.loads(data)


def _unencodable(value: object) -> None:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


_SPACED = (", ", ": ")


def dumps(
    value: Any,
    *,
    separators: tuple[str, str] | None = None,
    ensure_ascii: bool = True,
    indent: int | None = None,
) -> str:
    """C{json.dumps(value, separators=..., ensure_ascii=..., indent=...)}."""
    quote = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
    if indent is not None:
        # json's own rule: with an indent, items end in "," and the line break.
        item, key = separators if separators is not None else (",", ": ")
        parts: list[str] = []
        _Indenting(quote, " " * indent, item, key, parts).write(value, 0)
        return "".join(parts)
    item, key = separators if separators is not None else _SPACED
    if isinstance(value, str):
        return str(quote(value))
    encoder = _json.make_encoder(
        {},
        _unencodable,
        quote,
        None,
        key,
        item,
        False,
        False,
        True,
    )
    return "".join(encoder(value, 0))


#: What json writes for the floats JSON itself lacks, by their C{repr}.
_NOT_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _scalar(value: object, quote: Any) -> str | None:
    """A JSON scalar as json writes it, or C{None} for a container (or what JSON lacks)."""
    if isinstance(value, str):
        return str(quote(value))
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        text = float.__repr__(value)
        return _NOT_FINITE.get(text, text)
    return None


def _key(name: object, quote: Any) -> str:
    """A dict key as json writes it: strings, and numbers, booleans and null as text."""
    if isinstance(name, str):
        return str(quote(name))
    if isinstance(name, bool | int | float) or name is None:
        text = _scalar(name, quote)
        assert text is not None
        return str(quote(text))
    raise TypeError(f"keys must be str, int, float, bool or None, not {name.__class__.__name__}")


class _Indenting:
    """Writes a value as C{json.dumps(value, indent=...)} does (its pure-Python encoder)."""

    def __init__(self, quote: Any, step: str, item: str, key: str, out: list[str]) -> None:
        self.quote, self.step, self.item, self.key, self.out = quote, step, item, key, out
        self.open_ids: set[int] = set()

    def write(self, value: Any, level: int) -> None:
        out = self.out
        scalar = _scalar(value, self.quote)
        if scalar is not None:
            out.append(scalar)
            return
        pairs: list[tuple[str | None, Any]]
        if isinstance(value, list | tuple):
            if not value:
                out.append("[]")
                return
            pairs, ends = [(None, v) for v in value], "[]"
        elif isinstance(value, dict):
            if not value:
                out.append("{}")
                return
            pairs, ends = [(_key(k, self.quote), v) for k, v in value.items()], "{}"
        else:
            _unencodable(value)
            return
        if id(value) in self.open_ids:
            raise ValueError("Circular reference detected")
        self.open_ids.add(id(value))
        inner = "\n" + self.step * (level + 1)
        out.append(ends[0])
        for index, (name, member) in enumerate(pairs):
            out.append(inner if index == 0 else self.item + inner)
            if name is not None:
                out.append(name + self.key)
            self.write(member, level + 1)
        out.append("\n" + self.step * level + ends[1])
        self.open_ids.discard(id(value))
