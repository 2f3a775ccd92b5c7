"""Splitting endpoint strings."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.endpoints import split_endpoint


class SplitEndpointTests(SynchronousTestCase):
    def test_colons_split_and_escapes_are_undone(self) -> None:
        """Unescaped colons separate parts; an escaped colon stays inside its part."""
        self.assertEqual(
            split_endpoint(r"tcp6:8899:interface=\:\:1"), ["tcp6", "8899", "interface=::1"]
        )
        self.assertEqual(
            split_endpoint(r"unix:/tmp/a\:b/s.sock:mode=600"),
            ["unix", "/tmp/a:b/s.sock", "mode=600"],
        )
        self.assertEqual(split_endpoint("tcp"), ["tcp"])
