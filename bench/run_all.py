"""
Measure every figure of C{bench/figures.md} again, in one run, and write that file.

    make bench                          # installs .venv-bench (mcp-proxy) first
    .venv/bin/python bench/run_all.py [--quick] [--output FILE]

Runs, one after another with this interpreter: C{bench_gateways.py} (mcpx beside
C{mcp-proxy}), C{bench_mcp.py} (C{/mcp} against direct calls, both phases),
C{bench_call.py} (C{/v1/call}, C{mcpx call} from the shell, the daemon's memory),
C{bench_idle.py --cached-bytecode} (an idle daemon's memory), C{bench_load.py} (64
clients at once, 1,000 idle sessions, RSS over 100k calls), C{bench_catalogue.py}
(C{tools/list} over 25, 50 and 100 servers of 100 tools), C{bench_fleet.py} (the
PostgreSQL store against SQLite, three daemons against one behind HAProxy) and, where valgrind is
installed, C{bench_cli.py} (the instructions C{mcpx call} executes).  Each script's output
goes into the file as it printed it, under the command that made it, with the load average
before and after: figures from a loaded machine say so.  C{--quick} runs fewer calls.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from targets import parse_figures, profile_areas, report

HERE = Path(__file__).resolve().parent
README = HERE / "README.md"
#: The lines of C{README.md} between which the targets table is written anew each run.
TABLE_BEGINS = "<!-- targets: written by bench/run_all.py; do not edit by hand -->"
TABLE_ENDS = "<!-- end of targets -->"


def runs(quick: bool) -> list[list[str]]:
    calls = ["--calls", "500", "--warm", "100"] if quick else []
    found = [
        ["bench_gateways.py", *calls],
        ["bench_mcp.py", *calls],
        ["bench_call.py", *(["--calls", "500"] if quick else [])],
        ["bench_idle.py", "--cached-bytecode"],
        ["bench_load.py", *(["--seconds", "10", "--requests", "20000"] if quick else [])],
        ["bench_catalogue.py", *(["--servers", "25,100", "--lists", "10"] if quick else [])],
        ["bench_fleet.py", *(["--rounds", "50", "--seconds", "4"] if quick else [])],
        ["bench_serve.py", *calls],
        *(
            [
                "bench_mcp.py",
                "--phase",
                "pinned",
                *calls,
                "--profile",
                str(Path(tempfile.gettempdir()) / f"mcpx-bench-{method.replace('/', '-')}.prof"),
                "--profile-era",
                "modern",
                "--profile-method",
                method,
            ]
            for method in ("tools/list", "tools/call")
        ),
    ]
    if shutil.which("valgrind"):
        found.append(["bench_cli.py"])
    return found


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer calls per series")
    parser.add_argument("--output", default=str(HERE / "figures.md"))
    options = parser.parse_args()
    started = time.perf_counter()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "# Benchmark figures",
        "",
        f"Written by `bench/run_all.py{' --quick' if options.quick else ''}` on {now}; "
        "every block below is one script's output as it printed it. Run `make bench` to "
        "measure them all again. Load averages are of the whole machine: a high one means "
        "other work shared the CPUs, so compare the figures within one block.",
    ]
    for argv in runs(options.quick):
        command = f".venv/bin/python bench/{' '.join(argv)}"
        print(f"$ {command}", flush=True)
        before = load()
        done = subprocess.run(
            [sys.executable, str(HERE / argv[0]), *argv[1:]],
            check=False,
            capture_output=True,
            text=True,
            cwd=HERE.parent,
        )
        output = done.stdout + (f"\n{done.stderr[-2000:]}" if done.returncode else "")
        print(output, flush=True)
        parts += [
            "",
            f"## `{command}`",
            "",
            f"Load average before: {before}; after: {load()}; exit status {done.returncode}.",
            "",
            "```",
            output.rstrip("\n"),
            "```",
        ]
    figures = parse_figures("\n".join(parts) + "\n")
    judged = [
        "",
        "## Against the targets",
        "",
        "Judged by `bench/targets.py` from the blocks below.",
        "",
        report(figures),
        "",
        "## Where the daemon's time goes (cProfile, one core, 2026-07-28 requests)",
        "",
        profile_areas(figures),
    ]
    parts[3:3] = judged
    Path(options.output).write_text("\n".join(parts) + "\n", encoding="utf-8")
    if not options.quick and Path(options.output) == HERE / "figures.md":
        write_readme_table(now, "\n".join(judged[5:]))
    print(f"wrote {options.output} in {time.perf_counter() - started:.0f} s")


def write_readme_table(when: str, table: str) -> None:
    """Put this run's targets table and profile areas into C{README.md}, between the markers."""
    text = README.read_text(encoding="utf-8")
    begins, ends = text.index(TABLE_BEGINS), text.index(TABLE_ENDS)
    fresh = (
        f"{TABLE_BEGINS}\nMeasured {when} by `make bench` (the run in `figures.md`).\n\n{table}\n"
    )
    README.write_text(text[:begins] + fresh + text[ends:], encoding="utf-8")


if __name__ == "__main__":
    main()
