"""
The targets table of C{bench/README.md} is judged from the figures of one run: these tests
check that the judging reads what the bench scripts print and says met or missed rightly.
"""

from __future__ import annotations

import sys
from pathlib import Path

from twisted.trial.unittest import TestCase

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import run_all  # noqa: E402  (bench/ is not a package)
import targets  # noqa: E402


def idle_output(median: float) -> str:
    return f"bytecode: cached\n  idle daemon RSS: median {median} MB (min {median}, max {median})\n"


class TargetsTests(TestCase):
    def test_every_target_is_measured_by_the_committed_run(self) -> None:
        """
        The committed C{figures.md} holds a figure for every target: a bench script whose
        output changed shape would show here as a target not measured.
        """
        figures = targets.parse_figures((BENCH / "figures.md").read_text(encoding="utf-8"))
        absent = [t.wants for t, verdict, _ in targets.verdicts(figures) if verdict is None]
        self.assertEqual(absent, [])

    def test_met_and_missed(self) -> None:
        """A figure within the target is met; one beyond it is missed, by the difference."""
        idle = next(t for t in targets.TARGETS if "idle daemon" in t.wants)
        met = idle.judge({"bench_idle.py": idle_output(44.1)})
        missed = idle.judge({"bench_idle.py": idle_output(47.5)})
        self.assertEqual((met.met, missed.met), (True, False))
        self.assertIn("2.5 MB over", missed.gap)

    def test_missing_figure_is_said_not_guessed(self) -> None:
        """A script that did not run leaves its targets "not measured" in the table."""
        table = targets.report({})
        self.assertIn("not measured: bench_idle.py did not run", table)
        self.assertIn(f"0 met, 0 missed, {len(targets.TARGETS)} not measured.", table)

    def test_readme_table_replaced_between_the_markers(self) -> None:
        """The run rewrites only the table between the markers, and keeps the rest."""
        readme = Path(self.mktemp())
        readme.write_text(
            f"before\n{run_all.TABLE_BEGINS}\nold table\n{run_all.TABLE_ENDS}\nafter\n",
            encoding="utf-8",
        )
        self.patch(run_all, "README", readme)
        run_all.write_readme_table("2026-12-02 10:00 UTC", "| new | table |")
        text = readme.read_text(encoding="utf-8")
        self.assertNotIn("old table", text)
        self.assertIn("| new | table |", text)
        self.assertTrue(text.startswith("before\n") and text.endswith("after\n"))


def one_core_output(method: str, rows: dict[str, tuple[float, float, int]]) -> str:
    """
    bench_mcp.py's one-core section with a concurrent row per era: C{rows} maps an era to
    (calls/s, µs of daemon CPU per request, the daemon's busy share in %), printed as the
    bench prints them.
    """
    lines = ["== one core: daemon alone on CPU 1 (taskset) =="]
    for era, (rate, cpu_us, busy) in rows.items():
        lines.append(
            f"  {era} {method}, 48 in flight".ljust(37)
            + f"   2.000    4.000    9.000 {rate:10.0f} {cpu_us:8.0f}    12% {busy:5d}%    30%"
            + "     5%     3%   0.01"
        )
    return "\n".join(lines) + "\n"


class CapacityTests(TestCase):
    """
    A one-core target is judged by the rate measured when the daemon was saturated, and by
    one CPU's worth at its measured CPU per request when it was not; the verdict says which.
    """

    def judge(self, rows: dict[str, tuple[float, float, int]]) -> targets.Verdict:
        listing = next(t for t in targets.TARGETS if "`tools/list` ≥ 10,000/s" in t.wants)
        return listing.judge({"bench_mcp.py": one_core_output("tools/list", rows)})

    def test_saturated_daemon_judged_by_the_rate_measured(self) -> None:
        """
        A daemon 95% busy answering 9,000/s misses 10,000/s, though one CPU's worth at its
        95 µs a request would be over 10,000.
        """
        verdict = self.judge({"legacy": (9000, 95, 95), "modern": (9500, 95, 96)})
        self.assertFalse(verdict.met)
        self.assertIn("by the measured rate", verdict.measure)
        self.assertIn("1,000 calls/s short", verdict.gap)
        self.assertIn("legacy 9,000/s measured, the daemon 95% busy", verdict.figure)

    def test_idle_daemon_judged_by_one_cpus_worth(self) -> None:
        """
        A daemon only 50% busy answering 5,000/s at 95 µs a request is judged at one CPU's
        worth (10,526/s), and the figure says what was measured.
        """
        verdict = self.judge({"legacy": (5000, 95, 50), "modern": (5200, 95, 52)})
        self.assertTrue(verdict.met)
        self.assertIn("by one CPU's worth", verdict.measure)
        self.assertIn("legacy 10,526/s, one CPU's worth at 95 µs", verdict.figure)
        self.assertIn("measured 5,000/s with the daemon only 50% busy", verdict.figure)

    def test_idle_daemon_too_slow_per_request_is_missed(self) -> None:
        """Judging by one CPU's worth does not pass a target the CPU per request misses."""
        verdict = self.judge({"legacy": (5000, 108, 50), "modern": (5000, 108, 50)})
        self.assertFalse(verdict.met)
        self.assertIn("741 calls/s short", verdict.gap)

    def test_measure_said_in_the_table(self) -> None:
        """The README's verdict column names the measure the verdict was reached by."""
        table = targets.report(
            {
                "bench_mcp.py": one_core_output(
                    "tools/list", {"legacy": (9000, 95, 95), "modern": (9000, 95, 95)}
                )
            }
        )
        self.assertIn("**missed** (by the measured rate: the daemon was ≥ 90% busy)", table)

    def test_both_era_measures_said(self) -> None:
        """One era saturated and the other not: each is judged by its own measure."""
        verdict = self.judge({"legacy": (10500, 90, 95), "modern": (6000, 90, 60)})
        self.assertTrue(verdict.met)
        self.assertIn("each era by its own measure", verdict.measure)
