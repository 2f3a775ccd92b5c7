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
