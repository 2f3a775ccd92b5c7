"""Tests for L{mcpx.settings.paths}."""

from __future__ import annotations

from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.paths import ConfigLocation, config_location, state_dir, state_dir_name


class ConfigLocationTests(SynchronousTestCase):
    """Where the config file is looked for."""

    def test_named(self) -> None:
        """C{$MCPX_CONFIG} names the file explicitly."""
        self.assertEqual(
            config_location({"MCPX_CONFIG": "/etc/mcpx.json", "XDG_CONFIG_HOME": "/x"}),
            ConfigLocation(Path("/etc/mcpx.json"), explicit=True),
        )

    def test_named_home(self) -> None:
        """A leading C{~} in C{$MCPX_CONFIG} is the home directory."""
        self.assertEqual(
            config_location({"MCPX_CONFIG": "~/m.json", "HOME": "/home/u"}).path,
            Path("/home/u/m.json"),
        )

    def test_xdg(self) -> None:
        """Otherwise it is C{mcpx/config.json} under C{$XDG_CONFIG_HOME}."""
        self.assertEqual(
            config_location({"XDG_CONFIG_HOME": "/cfg", "HOME": "/home/u"}),
            ConfigLocation(Path("/cfg/mcpx/config.json"), explicit=False),
        )

    def test_xdg_default(self) -> None:
        """Without C{$XDG_CONFIG_HOME} (or with a relative one) it is under C{~/.config}."""
        expected = Path("/home/u/.config/mcpx/config.json")
        self.assertEqual(config_location({"HOME": "/home/u"}).path, expected)
        self.assertEqual(
            config_location({"HOME": "/home/u", "XDG_CONFIG_HOME": "rel"}).path, expected
        )


class StateDirTests(SynchronousTestCase):
    """Where state is kept."""

    def test_named(self) -> None:
        """C{$MCPX_STATE_DIR} wins."""
        self.assertEqual(
            state_dir({"MCPX_STATE_DIR": "/var/mcpx", "XDG_STATE_HOME": "/s"}), Path("/var/mcpx")
        )

    def test_xdg(self) -> None:
        """Otherwise C{mcpx} under C{$XDG_STATE_HOME}, by default C{~/.local/state}."""
        self.assertEqual(state_dir({"XDG_STATE_HOME": "/s"}), Path("/s/mcpx"))
        self.assertEqual(state_dir({"HOME": "/home/u"}), Path("/home/u/.local/state/mcpx"))


class StateDirNameTests(SynchronousTestCase):
    """L{state_dir_name}, the pathlib-free spelling C{mcpx call} uses, names the same directory."""

    def test_same_as_state_dir(self) -> None:
        for environ in (
            {"MCPX_STATE_DIR": "/srv/mcpx", "HOME": "/home/u"},
            {"MCPX_STATE_DIR": "~", "HOME": "/home/u"},
            {"MCPX_STATE_DIR": "~/s/", "HOME": "/home/u/"},
            {"XDG_STATE_HOME": "/state/", "HOME": "/home/u"},
            {"XDG_STATE_HOME": "relative", "HOME": "/home/u"},
            {"HOME": "/home/u"},
        ):
            self.assertEqual(Path(state_dir_name(environ)), state_dir(environ), environ)
