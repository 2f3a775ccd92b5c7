"""
The standard library's C{json} against orjson and msgspec on the messages of the hot path.

Each codec reads and writes the same texts, back to back in one process: the host's
C{tools/call} as it arrives (2026-07-28, with its C{_meta}), the request mcpx writes to the
upstream, the upstream's answer line, the answer mcpx writes back, a C{tools/list} answer
(the 11 KB mcpx serves in the bench's daemon, here the demo's tools forty times over), and
a 200 KB non-ASCII tool result.  C{mcpx} is the project's own reader and writer
(L{mcpx.wire.jsontext.loads} with its strict-number and nesting rules, and
L{mcpx.wire.messages.encode_json}); C{stdlib} is plain C{json}, for what the rules cost.

orjson and msgspec are not in the product: C{make bench-env} puts them in C{.venv-bench},
whose site-packages this script borrows when the product's virtualenv lacks them.  Then
it says which of each codec's answers differ from mcpx's rules (big integers, C{1e400},
C{NaN}, deep nesting), which adopting one would have to keep.

    .venv/bin/python bench/bench_json.py [--repeat N]

Best of five, microseconds per message.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mcpx.spec.downgrade import downgrade, envelope  # noqa: E402
from mcpx.spec.revision import Revision  # noqa: E402
from mcpx.wire import jsontext  # noqa: E402
from mcpx.wire.messages import Response, encode, encode_json, parse, spelled_as_read  # noqa: E402


def optional(name: str) -> Any:
    """The module C{name}, or C{None} where it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


if optional("orjson") is None:
    sys.path += [str(p) for p in (REPO / ".venv-bench" / "lib").glob("python*/site-packages")]
orjson = optional("orjson")
msgspec = optional("msgspec")
if msgspec is not None:
    importlib.import_module("msgspec.json")

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench_gateways", "version": "0"},
}
TOOL = {
    "name": "echo",
    "title": "Echo",
    "description": "Answer with the text it was given, unchanged.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "What to say back"}},
        "required": ["text"],
    },
    "annotations": {"readOnlyHint": True, "idempotentHint": True},
}


def messages() -> dict[str, Any]:
    big = "Grüße, 世界, ça va? " * 10_000
    return {
        "host tools/call": {
            "jsonrpc": "2.0",
            "id": 1016,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": META},
        },
        "upstream request": {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}},
        },
        "upstream answer": {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {"content": [{"type": "text", "text": "x"}]},
        },
        "tools/list, 11 KB": {
            "jsonrpc": "2.0",
            "id": 1016,
            "result": {"tools": [dict(TOOL, name=f"echo{i}") for i in range(40)]},
        },
        "non-ASCII result, 200 KB": {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {"content": [{"type": "text", "text": big}]},
        },
    }


def best(function: Callable[[], object], repeat: int) -> float:
    """Microseconds per call, the best of five runs of C{repeat} calls."""
    return min(timeit.repeat(function, number=repeat, repeat=5)) / repeat * 1e6


def codecs() -> dict[str, tuple[Callable[[bytes], Any], Callable[[Any], bytes]]]:
    found: dict[str, tuple[Callable[[bytes], Any], Callable[[Any], bytes]]] = {
        "mcpx": (jsontext.loads, encode_json),
        "stdlib": (json.loads, lambda v: json.dumps(v, separators=(",", ":")).encode()),
    }
    if orjson is not None:
        found["orjson"] = (orjson.loads, orjson.dumps)
    if msgspec is not None:
        decoder, encoder = msgspec.json.Decoder(), msgspec.json.Encoder()
        found["msgspec"] = (decoder.decode, encoder.encode)
    return found


def rules(loads: Callable[[bytes], Any], dumps: Callable[[Any], bytes]) -> list[str]:
    """Where a codec's answer differs from mcpx's rules."""
    said = []
    for text, want in (
        (b"[1e400]", "refused"),
        (b"[NaN]", "refused"),
        (b"[" * 101 + b"]" * 101, "refused"),
        (b"[" * 90 + b"]" * 90, "read"),
        (b"[123456789012345678901234567890]", "read"),
    ):
        try:
            loads(text)
            got = "read"
        except (ValueError, RecursionError) as e:
            got = f"refused ({type(e).__name__})"
        if not got.startswith(want):
            said.append(f"{text[:24]!r}: {got}, mcpx: {want}")
    try:
        dumps([123456789012345678901234567890])
    except (TypeError, ValueError, OverflowError) as e:
        said.append(f"writing a 30-digit integer: {type(e).__name__}")
    if dumps({"a": "é"}) != encode_json({"a": "é"}):
        said.append(f"writes {dumps({'a': 'é'})!r}, mcpx {encode_json({'a': 'é'})!r}")
    return said


def passed_on(line: bytes, revision: Revision) -> bytes:
    """What the daemon does with an upstream's answer line: read, spell, write for the host."""
    message = parse(line)
    assert isinstance(message, Response)
    result = message.result
    result.setdefault("resultType", "complete")
    if revision.is_modern:
        spelled: Any = envelope(
            result,
            "tools/call",
            server_info={"name": "mcpx", "version": "0"},
            list_max_age=0,
            read_max_age=0,
        )
    else:
        spelled = downgrade(result, "tools/call", revision)
    return encode(Response(1016, spelled_as_read(result, spelled)))


def passthrough(repeat: int) -> None:
    """
    An upstream's answer passed on, as the demo writes it (with its C{resultType} and
    C{_meta}), read whole and encoded again (the parsed path) against passed on as the
    bytes it came in (L{jsontext.read_result}), back to back.
    """
    meta = {"io.modelcontextprotocol/serverInfo": {"name": "mcpx-demo", "version": "0.1.0"}}
    print("a pass-through tools/call answer, read, spelled and written for the host (us):")
    print(f"  {'answer':<34} {'size':>8} {'revision':>11} {'parsed':>8} {'as bytes':>9}")
    for name, text in (("echo x", "x"), ("echo, 125 KB not ASCII", "Grüße, 世界, ça va? " * 5000)):
        result = {"content": [{"type": "text", "text": text}], "resultType": "complete"}
        line = encode_json({"jsonrpc": "2.0", "id": 7, "result": {**result, "_meta": meta}})
        times = max(20, repeat * 100 // max(100, len(line)))
        for revision in (Revision.V2025_06_18, Revision.V2026_07_28):
            read = jsontext.read_result
            jsontext.read_result = lambda data: None
            try:
                parsed_bytes = passed_on(line, revision)
                parsed = best(lambda: passed_on(line, revision), times)  # noqa: B023
            finally:
                jsontext.read_result = read
            as_bytes = best(lambda: passed_on(line, revision), times)  # noqa: B023
            same = "same bytes" if passed_on(line, revision) == parsed_bytes else "DIFFERENT"
            print(
                f"  {name:<34} {len(line):>8} {revision.value:>11} {parsed:8.2f} "
                f"{as_bytes:9.2f}  {same}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=2000, help="calls per timing (2000)")
    options = parser.parse_args()
    found = codecs()
    print(f"Python {sys.version.split()[0]}; " + ", ".join(found))
    if orjson is not None:
        print(f"orjson {orjson.__version__}")
    if msgspec is not None:
        print(f"msgspec {msgspec.__version__}")
    print(f"  {'message':<26} {'size':>8}  " + "  ".join(f"{n:>16}" for n in found))
    print(f"  {'':<26} {'':>8}  " + "  ".join(f"{'read  write us':>16}" for _ in found))
    for name, value in messages().items():
        text = encode_json(value)
        repeat = max(20, options.repeat * 200 // max(200, len(text)))
        cells = []
        for loads, dumps in found.values():
            cells.append(
                f"{best(lambda: loads(text), repeat):7.2f}"  # noqa: B023
                f"{best(lambda: dumps(value), repeat):8.2f}"  # noqa: B023
            )
        print(f"  {name:<26} {len(text):>8}  " + "  ".join(f"{c:>16}" for c in cells))
    passthrough(options.repeat)
    for name, (loads, dumps) in found.items():
        if name in ("mcpx", "stdlib"):
            continue
        differ = rules(loads, dumps)
        print(f"{name} against mcpx's rules: " + ("; ".join(differ) if differ else "the same"))


if __name__ == "__main__":
    main()
