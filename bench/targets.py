"""
The project's performance targets, each judged from the figures of one C{run_all.py} run.

L{run_all} hands L{report} every script's output as it printed it; each target reads the
lines it needs from them, and the report says, per target, the figure, where it comes from
and whether it is met or by how much it is missed.  A figure that is not in the output (a
script that failed or was not run) is said to be missing, never guessed.

Also a command: C{.venv/bin/python bench/targets.py [FIGURES]} prints the report for an
existing C{figures.md} (default C{bench/figures.md}) without measuring anything again.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: A script's output, by the script's file name (C{"bench_mcp.py"}); for the profile runs, by
#: the name L{run_all} gives them (C{"profile tools/list"}).
Figures = Mapping[str, str]


class Missing(Exception):
    """A figure a target needs is not in the output."""


@dataclass(frozen=True)
class Row:
    """One series' row of a bench table: latencies in ms, calls/s, daemon CPU µs per call."""

    p50: float
    p90: float
    p99: float
    rate: float
    cpu_us: float | None


@dataclass(frozen=True)
class Verdict:
    figure: str
    met: bool
    #: How far from the target, said in the target's unit ("" where met).
    gap: str = ""
    #: Which measure the verdict was reached by, where a target could be read two ways.
    measure: str = ""


@dataclass(frozen=True)
class Target:
    wants: str
    source: str
    judge: Callable[[Figures], Verdict]
    #: Where the time or memory goes when it is missed: a pointer to the profile.
    why: str = ""


def output(figures: Figures, script: str) -> str:
    text = figures.get(script)
    if not text:
        raise Missing(f"{script} did not run")
    return text


def section(text: str, heading: str) -> str:
    """The lines of C{text} from the line starting with C{heading} to the next C{==} heading."""
    start = text.find(heading)
    if start < 0:
        raise Missing(f"no section {heading!r}")
    end = text.find("\n==", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


_NUMBER = r"([0-9.]+|-)"


def row(text: str, label: str) -> Row:
    """The table row whose label is C{label}."""
    # Four columns (latencies and calls/s), and in some scripts a fifth, the CPU per call.
    numbers = r"\s+".join([_NUMBER] * 4) + rf"(?:[ \t]+{_NUMBER})?"
    pattern = re.compile(rf"^\s+{re.escape(label)}\s+{numbers}", re.M)
    found = pattern.search(text)
    if found is None:
        raise Missing(f"no row {label!r}")
    values = [None if v in ("-", None) else float(v) for v in found.groups()]
    p50, p90, p99, rate, cpu = values
    assert p50 is not None and p90 is not None and p99 is not None and rate is not None
    return Row(p50, p90, p99, rate, cpu)


def number(text: str, pattern: str) -> float:
    found = re.search(pattern, text, re.M)
    if found is None:
        raise Missing(f"no figure matching {pattern!r}")
    return float(found.group(1).replace(",", ""))


def at_least(value: float, target: float, unit: str, figure: str) -> Verdict:
    if value >= target:
        return Verdict(figure, True)
    return Verdict(figure, False, f"{target - value:,.0f} {unit} short (x{value / target:.2f})")


def at_most(value: float, target: float, unit: str, figure: str, digits: int = 1) -> Verdict:
    if value <= target:
        return Verdict(figure, True)
    return Verdict(
        figure, False, f"{value - target:.{digits}f} {unit} over (x{value / target:.2f})"
    )


# -- The targets ---------------------------------------------------------------------------


def _one_core(figures: Figures) -> str:
    return section(output(figures, "bench_mcp.py"), "== one core")


#: A daemon at least this busy over a series (its CPU time against the series' wall time)
#: had no time left over: the rate measured is what its one CPU answers.
SATURATED = 0.90


@dataclass(frozen=True)
class Capacity:
    """A concurrent series of a CPU-bound target: rate measured, CPU per request, how busy."""

    era: str
    rate: float
    cpu_us: float
    busy: float

    @property
    def saturated(self) -> bool:
        return self.busy >= SATURATED

    @property
    def per_cpu(self) -> float:
        """The requests one CPU answers a second at the measured CPU time per request."""
        return 1e6 / self.cpu_us

    @property
    def value(self) -> float:
        """The rate measured when the daemon was saturated; else one CPU's worth."""
        return self.rate if self.saturated else self.per_cpu

    def said(self) -> str:
        if self.saturated:
            return (
                f"{self.era} {self.rate:,.0f}/s measured, the daemon {self.busy:.0%} busy "
                f"({self.cpu_us:.0f} µs of its CPU each)"
            )
        return (
            f"{self.era} {self.per_cpu:,.0f}/s, one CPU's worth at {self.cpu_us:.0f} µs of "
            f"daemon CPU each (measured {self.rate:,.0f}/s with the daemon only "
            f"{self.busy:.0%} busy)"
        )


def capacity(text: str, era: str, label: str) -> Capacity:
    """
    The row C{label} (a regular expression) of a table with the daemon's CPU per request
    and its busy share (bench_mcp.py's and bench_gateways.py's: latencies, calls/s,
    µs per request, the kernel's share, the daemon's busy share, ...).
    """
    pattern = (
        rf"^\s+{label}\s+" + r"\s+".join(["[0-9.]+"] * 3) + r"\s+([0-9.]+)\s+([0-9.]+)"
        r"\s+[0-9]+%\s+([0-9]+)%"
    )
    found = re.search(pattern, text, re.M)
    if found is None:
        raise Missing(f"no row {label!r} with the daemon's CPU and busy share")
    rate, cpu_us, busy = (float(v) for v in found.groups())
    return Capacity(era, rate, cpu_us, busy / 100)


def judge_capacity(capacities: list[Capacity], target: float) -> Verdict:
    """
    At least C{target} requests a second in every series: by the rate measured where the
    daemon was saturated (≥ L{SATURATED} busy), else by one CPU's worth at the CPU time per
    request measured, and the verdict says which.
    """
    figure = ", ".join(c.said() for c in capacities)
    if all(c.saturated for c in capacities):
        measure = f"by the measured rate: the daemon was ≥ {SATURATED:.0%} busy"
    elif not any(c.saturated for c in capacities):
        measure = (
            "by one CPU's worth at the measured CPU per request: the daemon was under "
            f"{SATURATED:.0%} busy, so the rate measured is not its capacity"
        )
    else:
        measure = (
            "each era by its own measure: the measured rate where the daemon was "
            f"≥ {SATURATED:.0%} busy, else one CPU's worth at the measured CPU per request"
        )
    verdict = at_least(min(c.value for c in capacities), target, "calls/s", figure)
    return Verdict(verdict.figure, verdict.met, verdict.gap, measure)


def _rate_on_one_core(method: str, target: float) -> Callable[[Figures], Verdict]:
    def judge(figures: Figures) -> Verdict:
        pinned = _one_core(figures)
        return judge_capacity(
            [
                capacity(pinned, era, rf"{era} {re.escape(method)}, [0-9]+ in flight")
                for era in ("legacy", "modern")
            ],
            target,
        )

    return judge


def _passthrough_call(figures: Figures) -> Verdict:
    text = output(figures, "bench_gateways.py")
    return judge_capacity(
        [
            capacity(text, era, rf"mcpx {era} tools/call, [0-9]+ in flight")
            for era in ("legacy", "modern")
        ],
        5000,
    )


def _health_floor(figures: Figures) -> Verdict:
    pinned = _one_core(figures)
    width = number(pinned, r"^\s+GET /health, ([0-9]+) in flight")
    health = row(pinned, f"GET /health, {width:.0f} in flight")
    return Verdict(
        f"{health.rate:,.0f}/s, {health.cpu_us:.0f} µs of daemon CPU each (twisted.web and Klein)",
        True,
    )


def _http_share(figures: Figures) -> Verdict:
    parts = []
    for method in ("tools/list", "tools/call"):
        text = output(figures, f"profile {method}")
        shares = dict(
            (name.strip(), float(share))
            for share, name in re.findall(r"^\s+[0-9.]+ us\s+([0-9.]+)%\s+(.+)$", text, re.M)
        )
        http = sum(v for k, v in shares.items() if k.startswith(("twisted.web", "Klein", "/mcp")))
        parts.append(f"{method} {http:.0f}%")
    return Verdict(
        "share of the daemon's busy time in the HTTP stack, under cProfile: " + ", ".join(parts),
        True,
    )


def _serve_added(figures: Figures) -> Verdict:
    text = output(figures, "bench_serve.py")
    direct = row(text, "direct demo, sequential").p50
    added = row(text, "mcpx serve, sequential").p50 - direct
    daemon = row(text, "daemon's MCP socket, sequential").p50 - direct
    figure = (
        f"+{added:.3f} ms p50 (sequential): the daemon +{daemon:.3f} ms (its MCP socket "
        f"straight), the bridge process +{added - daemon:.3f} ms"
    )
    return at_most(added, 0.2, "ms", figure, digits=3)


def _mcp_added(figures: Figures) -> Verdict:
    """What C{/mcp} adds over the direct stdio call, HTTP's own cost subtracted."""
    text = output(figures, "bench_gateways.py")
    added = {}
    for era in ("legacy", "modern"):
        found = re.search(
            rf"mcpx {era} tools/call, sequential: \+([0-9.]+) ms p50 over the direct stdio "
            r"call; \+?(-?[0-9.]+) ms with HTTP's (-?[0-9.]+) ms subtracted",
            text,
        )
        if found is None:
            raise Missing(f"no added-latency line for mcpx {era}")
        added[era] = (float(found.group(1)), float(found.group(2)), float(found.group(3)))
    http = next(iter(added.values()))[2]
    figure = ", ".join(f"{era} +{net:.3f} ms" for era, (_, net, _) in added.items()) + (
        f" p50 over the direct stdio call, HTTP's own {http:.3f} ms (bench/bare_answerer.py) "
        "subtracted (before: " + ", ".join(f"+{raw:.3f}" for raw, _, _ in added.values()) + ")"
    )
    one_cpu = {
        era: found.group(1)
        for era in ("legacy", "modern")
        if (
            found := re.search(
                rf"mcpx {era} tools/call, sequential, on one CPU: .* \+?(-?[0-9.]+) ms with "
                "HTTP's",
                text,
            )
        )
        is not None
    }
    if one_cpu:
        figure += "; every process on one CPU, direct call too: " + ", ".join(
            f"{era} +{net}" for era, net in one_cpu.items()
        )
    return at_most(max(net for _, net, _ in added.values()), 0.25, "ms", figure, digits=3)


def _against_mcp_proxy(figures: Figures) -> Verdict:
    """C{/mcp} against the best peer, the TypeScript C{mcp-proxy}, and the direct call."""
    text = output(figures, "bench_gateways.py")
    ratios = {
        era: number(
            text,
            rf"mcpx {era} against mcp-proxy\.ts, tools/call, in flight: .*calls/s x([0-9.]+)",
        )
        for era in ("legacy", "modern")
    }
    shares = {
        era: number(
            text, rf"mcpx {era} tools/call, in flight: ([0-9]+)% of the direct stdio call's"
        )
        for era in ("legacy", "modern")
    }
    figure = (
        ", ".join(f"{era} x{r:.2f}" for era, r in ratios.items())
        + " the TypeScript mcp-proxy's calls/s, 16 in flight; "
        + ", ".join(f"{era} {s:.0f}%" for era, s in shares.items())
        + " of the direct call's"
    )
    low, share = min(ratios.values()), min(shares.values())
    if low >= 3 and share >= 60:
        return Verdict(figure, True)
    return Verdict(figure, False, f"x{low:.2f} against x3, {share:.0f}% against 60%")


def _mcp_proxy_column(figures: Figures) -> Verdict:
    text = output(figures, "bench_gateways.py")
    found = []
    for peer in ("mcp-proxy", "mcp-proxy.ts"):
        row(text, f"{peer} tools/call, 16 in flight")
        version = re.search(rf"^{re.escape(peer)}: (.+?) \(", text, re.M)
        said = version.group(1) if version else "?"
        found.append(said if said.startswith(peer + " ") else f"{peer} {said}")
    return Verdict(" and ".join(found) + " in the same run", True)


def _many_clients(figures: Figures) -> Verdict:
    text = output(figures, "bench_load.py")
    p99 = number(text, r"p99 ([0-9.]+), max")
    errors = number(text, r"^\s+errors: ([0-9]+)")
    rate = number(text, r"calls, ([0-9]+) calls/s")
    figure = f"p99 {p99:.1f} ms at {rate:,.0f} calls/s, {errors:.0f} errors"
    if errors:
        return Verdict(figure, False, f"{errors:.0f} errors")
    return at_most(p99, 20, "ms", figure)


def _idle_sessions(figures: Figures) -> Verdict:
    text = output(figures, "bench_load.py")
    each = number(text, r"([0-9.]+) KB per session")
    return at_most(each, 20, "KB", f"{each:.1f} KB each (1,000 idle 2025-06-18 sessions)")


def _flat_memory(figures: Figures) -> Verdict:
    text = output(figures, "bench_load.py")
    growth = number(text, r"growth \+?(-?[0-9.]+) MB")
    return at_most(growth, 1, "MB", f"{growth:+.2f} MB from 10k to 100k calls", digits=2)


def _catalogue_row(text: str, label: str) -> tuple[int, int, float, str]:
    """
    Tools, pages and p50 ms of one bench_catalogue.py row (each page's request to its
    answer's last byte, every page together), and what the row says of the daemon's CPU,
    the client's own JSON decoding per listing and the wall time with it.
    """
    found = re.search(
        rf"^\s+{re.escape(label)}\s+([0-9]+)\s+([0-9]+)\s+[0-9]+\s+[0-9.]+\s+([0-9.]+)"
        r"\s+[0-9.]+\s+([0-9.]+)(?:\s+([0-9.]+)\s+[0-9.]+(?:\s+([0-9.]+))?)?\s*$",
        text,
        re.M,
    )
    if found is None:
        raise Missing(f"no row {label!r}")
    parts = f"daemon CPU {float(found.group(4)):.1f} ms"
    if found.group(5) is not None:
        parts += f"; the client's own JSON decoding {float(found.group(5)):.1f} ms"
        if found.group(6) is not None:
            parts += f" apart, {float(found.group(6)):.1f} ms wall with it"
    return int(found.group(1)), int(found.group(2)), float(found.group(3)), parts


def _catalogue(way: str, method: str) -> Callable[[Figures], Verdict]:
    """All pages of C{method} over 100 x 100 tools within 20 ms, and linear in the tools."""

    def judge(figures: Figures) -> Verdict:
        text = output(figures, "bench_catalogue.py")
        tools, pages, p50, parts = _catalogue_row(text, f"{way} 100x100 {method}")
        linear = number(text, rf"^\s+{way} {method}: .*\(largest/smallest x([0-9.]+)\)")
        figure = (
            f"{p50:.1f} ms p50 for all {pages} page{'s' if pages != 1 else ''}, each request "
            "to its answer's last byte "
            f"({tools:,} tools; {parts}); time per tool, 100 servers against 25: x{linear:.2f}"
        )
        verdict = at_most(p50, 20, "ms", figure)
        if verdict.met and linear > 1.5:
            return Verdict(figure, False, f"not linear: x{linear:.2f} the time per tool")
        return verdict

    return judge


def _gateway_list(figures: Figures) -> Verdict:
    """The gateway's own C{tools/list}: the same few tools however many servers stand behind."""
    text = output(figures, "bench_catalogue.py")
    small = _catalogue_row(text, "gateway 25x100 tools/list")[2]
    tools, _, large, _ = _catalogue_row(text, "gateway 100x100 tools/list")
    figure = f"{large:.2f} ms p50 ({tools} tools) behind 100 servers, {small:.2f} ms behind 25"
    return at_most(large, 20, "ms", figure)


def _idle_rss(figures: Figures) -> Verdict:
    text = output(figures, "bench_idle.py")
    rss = number(text, r"idle daemon RSS: median ([0-9.]+) MB")
    return at_most(rss, 45, "MB", f"{rss:.1f} MB (median of three starts, cached bytecode)")


def _cli_wall(figures: Figures) -> Verdict:
    text = output(figures, "bench_call.py")
    wall = number(text, r"mcpx call demo echo text=x \(warm daemon\)\s+([0-9.]+) ms")
    floor = number(text, r"python -c pass \(interpreter start alone\)\s+([0-9.]+) ms")
    return at_most(
        wall, 20, "ms", f"{wall:.1f} ms wall (median of 15; `python -c pass` {floor:.1f} ms)"
    )


def _cli_ratio(figures: Figures) -> Verdict:
    text = output(figures, "bench_call.py")
    ratio = number(text, r"spawning per call / mcpx call: x([0-9.]+)")
    figure = f"x{ratio:.2f} over spawning the demo per call"
    if ratio >= 12:
        return Verdict(figure, True)
    return Verdict(figure, False, f"x{ratio:.2f} against x12")


def _no_leaks(figures: Figures) -> Verdict:
    left = [
        int(n)
        for script in ("bench_call.py", "bench_mcp.py", "bench_serve.py")
        for n in re.findall(
            r"children (?:still alive after|left) ([0-9]+)", output(figures, script)
        )
    ]
    text = output(figures, "bench_call.py")
    idle = number(text, r"idle \(no upstream started\)\s+RSS\s+[0-9.]+ MB,\s+([0-9]+) open fds")
    after = number(text, r"after the CLI calls\s+RSS\s+[0-9.]+ MB,\s+([0-9]+) open fds")
    figure = (
        f"children alive after SIGTERM: {sum(left)} over {len(left)} daemon stops; descriptors "
        f"{idle:.0f} idle, {after:.0f} after every call (the warm upstream's pipes)"
    )
    return Verdict(figure, sum(left) == 0, "" if sum(left) == 0 else f"{sum(left)} children left")


_PROFILE_WHY = "see the profile below"

TARGETS: tuple[Target, ...] = (
    Target(
        "`/mcp` on one core: `tools/list` ≥ 10,000/s, both eras",
        "bench_mcp.py, one-core phase",
        _rate_on_one_core("tools/list", 10000),
        _PROFILE_WHY,
    ),
    Target(
        "`/mcp` on one core: pass-through `tools/call` ≥ 5,000/s",
        "bench_gateways.py, 16 in flight",
        _passthrough_call,
        _PROFILE_WHY,
    ),
    Target(
        "`/mcp` on one core: `mcpx_call` → demo ≥ 5,000/s, both eras",
        "bench_mcp.py, one-core phase",
        _rate_on_one_core("tools/call", 5000),
        _PROFILE_WHY,
    ),
    Target("`GET /health` as the floor", "bench_mcp.py, one-core phase", _health_floor),
    Target("the share of a request spent in the HTTP stack", "profile runs", _http_share),
    Target(
        "`mcpx serve` adds ≤ 0.2 ms p50 over the direct stdio call",
        "bench_serve.py",
        _serve_added,
        "most of it is the daemon's: see the profile below",
    ),
    Target(
        "`/mcp` adds ≤ 0.25 ms p50 over the direct stdio call",
        "bench_gateways.py, sequential",
        _mcp_added,
        _PROFILE_WHY,
    ),
    Target(
        "16 in flight: `/mcp` ≥ x3 the calls/s of the TypeScript `mcp-proxy`, ≥ 60% of direct",
        "bench_gateways.py",
        _against_mcp_proxy,
        _PROFILE_WHY,
    ),
    Target(
        "both `mcp-proxy`s (TypeScript and Python) in the same run",
        "bench_gateways.py",
        _mcp_proxy_column,
    ),
    Target(
        "64 concurrent clients: p99 ≤ 20 ms, no errors",
        "bench_load.py",
        _many_clients,
        "the daemon's CPU per call bounds the rate; 64 in flight queue behind it",
    ),
    Target("1,000 idle legacy sessions ≤ 20 KB each", "bench_load.py", _idle_sessions),
    Target("RSS flat over 100k requests (≤ 1 MB growth)", "bench_load.py", _flat_memory),
    Target(
        "100x100 tools, gateway `tools/list` ≤ 20 ms",
        "bench_catalogue.py",
        _gateway_list,
    ),
    Target(
        "100x100 tools, gateway discovery (`mcpx_tools`) ≤ 20 ms and linear",
        "bench_catalogue.py",
        _catalogue("gateway", "mcpx_tools"),
        "one answer holding every tool; see bench_catalogue.py's section",
    ),
    Target(
        "100x100 tools, pass-through `tools/list` (all pages) ≤ 20 ms and linear",
        "bench_catalogue.py",
        _catalogue("pass-through", "tools/list"),
        "eleven pages, 2 MB of tool definitions spelled for the host's revision; see "
        "bench_catalogue.py's section",
    ),
    Target(
        "idle daemon ≤ 45 MB RSS",
        "bench_idle.py",
        _idle_rss,
        "Twisted and the standard library's modules; see bench_idle.py's section",
    ),
    Target(
        "`mcpx call` on a warm daemon ≤ 20 ms wall",
        "bench_call.py",
        _cli_wall,
        "the interpreter's own start is most of it; see bench_cli.py's section",
    ),
    Target("`mcpx call` ≥ x12 faster than spawning per call", "bench_call.py", _cli_ratio),
    Target("no leaked processes or descriptors", "bench_call.py, bench_mcp.py", _no_leaks),
)


def verdicts(figures: Figures) -> Iterator[tuple[Target, Verdict | None, str]]:
    for target in TARGETS:
        try:
            yield target, target.judge(figures), ""
        except Missing as e:
            yield target, None, str(e)


def report(figures: Figures) -> str:
    """The targets table, in Markdown, and one line counting the met and the missed."""
    lines = ["| target | measured | from | verdict |", "|---|---|---|---|"]
    met = missed = absent = 0
    for target, verdict, problem in verdicts(figures):
        if verdict is None:
            absent += 1
            lines.append(f"| {target.wants} | not measured: {problem} | {target.source} | — |")
            continue
        measure = f" ({verdict.measure})" if verdict.measure else ""
        if verdict.met:
            met += 1
            said = f"**met**{measure}"
        else:
            missed += 1
            said = f"**missed**{measure}: {verdict.gap}" + (f"; {target.why}" if target.why else "")
        lines.append(f"| {target.wants} | {verdict.figure} | {target.source} | {said} |")
    lines += ["", f"{met} met, {missed} missed, {absent} not measured."]
    return "\n".join(lines)


def profile_areas(figures: Figures) -> str:
    """Each profile run's "by area" lines, as the profile printed them."""
    parts = []
    for name in ("profile tools/list", "profile tools/call"):
        text = figures.get(name, "")
        found = re.search(r"^\s+\d+ /mcp requests;.*$", text, re.M)
        areas = re.search(r"^\s+by area.*\n((?:\s+[0-9.]+ us .*\n)+)", text, re.M)
        if found is None or areas is None:
            parts.append(f"{name}: not measured")
            continue
        parts += [f"{name}:", "```", found.group(0).strip(), areas.group(1).rstrip(), "```"]
    return "\n".join(parts)


def parse_figures(text: str) -> dict[str, str]:
    """The outputs in a C{figures.md} that L{run_all} wrote, by script (or profile) name."""
    found: dict[str, str] = {}
    for heading, body in re.findall(r"^## `([^`]+)`\n.*?```\n(.*?)```", text, re.M | re.S):
        found[run_name(heading.split())] = body
    return found


def run_name(argv: list[str]) -> str:
    """The name a run's output goes by: its script, or C{profile <method>} for a profile run."""
    script = Path(next(a for a in argv if a.endswith(".py"))).name
    if "--profile-method" in argv:
        return f"profile {argv[argv.index('--profile-method') + 1]}"
    return script


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "figures.md"
    figures = parse_figures(path.read_text(encoding="utf-8"))
    print(report(figures))
    print()
    print(profile_areas(figures))


if __name__ == "__main__":
    main()
