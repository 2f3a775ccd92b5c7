# -*- test-case-name: tests.cli.test_quick -*-
"""
The terminal the command runs in: whether a person is there, and printing a line as
C{click.echo} does, without importing click, and without the control characters an
upstream server could use to make the terminal show something else (L{printable}).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def isatty(stream: Any) -> bool:
    """Whether C{stream} is a terminal; C{False} for one that cannot say."""
    try:
        return bool(stream.isatty())
    except Exception:
        return False


def on_terminal() -> bool:
    """
    Whether a person can be asked, in the terminal, what the server asks during a call:
    standard input and standard error are both terminals.
    """
    return isatty(sys.stdin) and isatty(sys.stderr)


def _escaped(code: int) -> str:
    """Character C{code} as JSON escapes it: C{\\u001b}, a surrogate pair past U+FFFF."""
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


class _Unsafe(dict[int, str]):
    """
    What a terminal may act on, or show as something else, instead of showing: the C0
    controls but newline and tab (escape, carriage return, backspace, bell ...), DEL, the
    C1 controls (0x80-0x9f, CSI and OSC among them), and every Unicode format character
    (category Cf): the bidirectional embeddings, overrides and isolates, which reorder
    what is shown, and the invisible ones, which make two names look the same (zero-width
    space, joiners, word joiner, byte order mark, soft hyphen, tag characters ...).
    Each is shown as its JSON escape (C{\\u001b}, C{\\u200b}); emoji joined with U+200D
    are shown escaped too, as a name is no place for them.  Past the controls, each
    character is classed as met, for C{str.translate}, and remembered (a safe one as
    itself), so a long text costs one class look-up per distinct character.
    """

    def __missing__(self, code: int) -> str:
        character = chr(code)
        if code < 0xA0:
            # Below the Latin-1 letters what is not in the table already is printable ASCII,
            # tab or newline: no class to look up, and no unicodedata to load for it.
            shown = character
        else:
            import unicodedata  # deferred for start-up time: a library to load

            shown = _escaped(code) if unicodedata.category(character) == "Cf" else character
        self[code] = shown
        return shown


_UNSAFE = _Unsafe(
    {code: _escaped(code) for code in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}
)


def printable(text: str) -> str:
    """
    C{text} with every character a terminal would act on (L{_UNSAFE}: an escape
    sequence clearing the screen, setting the title or writing the clipboard, a carriage
    return drawing over a line, a bidi override) shown as its JSON escape, visibly.

    A Windows line end becomes a newline.  In JSON, where such characters can only stand
    in a string, the escape means the same character: the JSON stays the same value.
    """
    return text.replace("\r\n", "\n").translate(_UNSAFE)


def echo(message: str, *, err: bool = False, nl: bool = True) -> None:
    """
    Print C{message} and a newline (none without C{nl}) on stdout (stderr with C{err}),
    flushed, as C{click.echo} prints text, but L{printable}: the CLI's one way to print
    what the daemon and its upstream servers say.
    """
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    stream.write(printable(message) + ("\n" if nl else ""))
    stream.flush()
