"""
The instructions C{mcpx call} executes on a warm daemon, counted by valgrind (callgrind), which
a loaded machine does not change the way it changes wall time.

One run: a real daemon (as in L{bench_call}) with the demo upstream warmed up by one call, then
C{valgrind --tool=callgrind} on C{python -c pass}, on C{mcpx call demo echo text=x} run as the
installed console script (the C{mcpx} next to the interpreter, which is what a user runs and
what L{bench_call} times) and as C{python -m mcpx} (which pays for runpy's imports as well:
C{importlib.util}, C{contextlib}, C{collections}, C{functools}), and on the same two run by
another interpreter (C{--python}, another checkout) if given.  Bytecode
is cached under a temporary C{PYTHONPYCACHEPREFIX}, written by a first uncounted run of each, so
neither side pays for compiling its modules.

    .venv/bin/python bench/bench_cli.py [--python ../main/.venv/bin/python]

The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench_call import DEMO_ARGV, Daemon

_REFS = re.compile(rb"I\s+refs:\s+([\d,]+)")


def instructions(argv: list[str], env: dict[str, str]) -> int:
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=True,
        # Not the bench's directory: python -m would import mcpx from there, whichever
        # checkout the interpreter belongs to.
        cwd=tempfile.gettempdir(),
    )
    found = _REFS.search(done.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from valgrind:\n{done.stderr.decode()[-2000:]}")
    return int(found.group(1).replace(b",", b""))


def checkout_of(python: str, env: dict[str, str]) -> str:
    """The checkout whose C{mcpx} C{python} imports with C{env} (C{PYTHONPATH} included)."""
    return subprocess.run(
        [python, "-c", "import mcpx, os; print(os.path.dirname(os.path.dirname(mcpx.__file__)))"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", help="also count mcpx call run by this interpreter")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    cache = tempfile.mkdtemp(prefix="mcpx-pyc-")
    daemon = Daemon({"demo": DEMO_ARGV}, None)
    try:
        env = {**daemon.env, "PYTHONPYCACHEPREFIX": cache}
        writing = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        words = ["call", "demo", "echo", "text=x"]
        pythons = [*([args.python] if args.python else []), sys.executable]

        def script(python: str) -> list[str]:
            return [python, str(Path(python).parent / "mcpx"), *words]

        def module(python: str) -> list[str]:
            return [python, "-m", "mcpx", *words]

        ways: dict[str, Callable[[str], list[str]]] = {"script": script, "-m mcpx": module}
        for python in pythons:
            for way in ways.values():
                # Uncounted: starts the demo, and writes the bytecode cache.
                subprocess.run(
                    way(python),
                    env=writing,
                    stdout=subprocess.DEVNULL,
                    check=True,
                    cwd=tempfile.gettempdir(),
                )
        base = instructions([sys.executable, "-c", "pass"], env)
        print(f"python {sys.version.split()[0]}; instructions (callgrind), bytecode cached")
        print(f"  python -c pass                               {base / 1e6:7.1f} M")
        for python in pythons:
            checkout = checkout_of(python, env)
            for name, way in ways.items():
                count = instructions(way(python), env)
                print(
                    f"  mcpx call demo echo text=x  {os.path.basename(checkout):>10}"
                    f"  {name:<8} {count / 1e6:7.1f} M  ({(count - base) / 1e6:.1f} M above"
                    " python -c pass)"
                )
    finally:
        daemon.stop()
        daemon.remove()
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
