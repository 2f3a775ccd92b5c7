"""
What an idle daemon holds in memory, and whether the TLS machinery is among it.

A real C{mcpx daemon} on the unix socket only (temp state directory, a config naming the demo
upstream, which is not started), started C{--runs} times; its C{VmRSS} from
C{/proc/<pid>/status} once it answers C{GET /health}, and whether the native libraries of
cryptography (which pyOpenSSL needs) or the system's libssl and libcrypto are mapped, from
C{/proc/<pid>/maps}.  For scale, the
RSS of C{python -c pass} and of a process that imports the reactor, the same way (with
service-identity installed, that imports pyOpenSSL and cryptography too), and of one that
imports it with those hidden, as C{mcpx daemon} does.

    .venv/bin/python bench/bench_idle.py [--runs N]
    .venv/bin/python bench/bench_idle.py --python ../main/.venv/bin/python  # vs another checkout

With C{--python}, the same measurement is made first with that interpreter (and the checkout
its C{mcpx} resolves to), then with this one, in one run.  With C{--cached-bytecode}, every
process writes and reads its bytecode under a temporary C{PYTHONPYCACHEPREFIX} (one uncounted
start first), as an installed mcpx, whose modules are compiled at install, would.

The figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_call
from bench_call import DEMO_ARGV, Daemon, rss_mb

#: Issue 18's target for an idle daemon's RSS.
TARGET_MB = 45.0

#: Packages whose native libraries in a daemon's memory are worth naming.
WATCHED = ("cryptography", "OpenSSL")

_SELF_RSS = "print(open('/proc/self/status').read().split('VmRSS:')[1].split()[0])"


#: The system's OpenSSL libraries (the standard library's ssl and hashlib load them).
SYSTEM_LIBRARIES = ("libssl", "libcrypto")


def mapped_packages(pid: int) -> list[str]:
    found: set[str] = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        found.update(name for name in WATCHED if f"/{name}/" in line)
        found.update(name for name in SYSTEM_LIBRARIES if f"/{name}.so" in line)
    return sorted(found)


def script_rss(code: str) -> float:
    out = subprocess.run(
        [bench_call.PYTHON, "-c", f"{code}\n{_SELF_RSS}"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.split()[-1]) / 1024


def measure(python: str, runs: int) -> None:
    # Daemon starts bench_call.PYTHON; the idle daemon never starts the demo.
    bench_call.PYTHON = python
    figures: list[float] = []
    mapped: list[str] = []
    if "PYTHONPYCACHEPREFIX" in os.environ:
        Daemon({"demo": DEMO_ARGV}, None).stop()  # writes the bytecode; not counted
    for _ in range(runs):
        daemon = Daemon({"demo": DEMO_ARGV}, None)
        try:
            time.sleep(0.3)
            figures.append(rss_mb(daemon.pid))
            mapped = mapped_packages(daemon.pid)
        finally:
            daemon.stop()
    found = subprocess.run(
        [python, "-c", "import mcpx, os; print(os.path.dirname(os.path.dirname(mcpx.__file__)))"],
        check=True,
        capture_output=True,
        text=True,
        cwd="/",
    ).stdout.strip()
    print(f"{found} ({python}), {runs} daemon starts:")
    median, low, high = statistics.median(figures), min(figures), max(figures)
    print(f"  idle daemon RSS: median {median:.1f} MB (min {low:.1f}, max {high:.1f})")
    met = "met" if median <= TARGET_MB else f"missed by {median - TARGET_MB:.1f} MB"
    print(f"  idle RSS {median:.1f} MB, target <= {TARGET_MB:.0f} MB: {met}")
    print("  native TLS libraries mapped while idle:", ", ".join(mapped) if mapped else "none")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--python", help="first measure a daemon run by this interpreter")
    parser.add_argument(
        "--cached-bytecode", action="store_true", help="bytecode written once, then read"
    )
    args = parser.parse_args()
    if args.cached_bytecode:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="mcpx-bench-pyc-")
        script_rss("pass")
    bytecode = "cached" if args.cached_bytecode else "as the environment leaves it"
    writes = os.environ.get("PYTHONDONTWRITEBYTECODE", "unset")
    print(f"bytecode: {bytecode} (PYTHONDONTWRITEBYTECODE={writes})")
    print(f"python {sys.version.split()[0]}")
    ours = sys.executable
    if args.python:
        measure(args.python, args.runs)
    measure(ours, args.runs)
    print(f"python -c pass:                       {script_rss('pass'):5.1f} MB")
    reactor = "from twisted.internet import reactor"
    print(f"python -c '{reactor}': {script_rss(reactor):5.1f} MB")
    # With service-identity installed, Twisted imports pyOpenSSL and cryptography with the
    # reactor; the daemon imports it with them hidden (mcpx/daemon/lean_start.py).
    hidden = "from mcpx.daemon.lean_start import without_tls_modules"
    lean = f"{hidden}\nwith without_tls_modules(): {reactor}"
    print(f"  the same, TLS modules hidden as mcpx daemon does: {script_rss(lean):5.1f} MB")


if __name__ == "__main__":
    main()
