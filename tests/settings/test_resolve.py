"""Tests for L{mcpx.settings.resolve}."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.config import ConfigFile, parse_config
from mcpx.settings.declarations import SETTINGS
from mcpx.settings.errors import SettingsError
from mcpx.settings.resolve import Source, SourceKind, resolve
from mcpx.spec.revision import NEWEST_FIRST, Revision

FILE = "/home/u/.config/mcpx/config.json"


def config(data: dict[str, object]) -> ConfigFile:
    """A config file at L{FILE} holding C{data}."""
    return parse_config(data, origin=FILE, path=FILE, environ={})


class LayeringTests(SynchronousTestCase):
    """Default < file < environment < flag, and each value says which one it came from."""

    def test_defaults(self) -> None:
        """With nothing given, every setting is its default, from the default."""
        settings = resolve(config=None, environ={}, flags={})
        for setting in SETTINGS:
            self.assertEqual(settings.value(setting.name), setting.default)
            self.assertEqual(settings.source(setting.name), Source(SourceKind.DEFAULT))

    def test_file(self) -> None:
        """The config file overrides the default, and its path is the source."""
        settings = resolve(config=config({"pool": {"callTimeout": "30s"}}), environ={}, flags={})
        self.assertEqual(settings["pool.callTimeout"], 30.0)
        self.assertEqual(settings.source("pool.callTimeout"), Source(SourceKind.FILE, FILE))
        self.assertEqual(settings.source("pool.callTimeout").describe(), FILE)
        self.assertEqual(settings.source("pool.idleTimeout").kind, SourceKind.DEFAULT)

    def test_env(self) -> None:
        """The environment overrides the file, and the variable is the source."""
        settings = resolve(
            config=config({"pool.callTimeout": "30s"}),
            environ={"MCPX_POOL_CALL_TIMEOUT": "45s"},
            flags={},
        )
        self.assertEqual(settings.duration("pool.callTimeout"), 45.0)
        source = settings.source("pool.callTimeout")
        self.assertEqual(source, Source(SourceKind.ENV, "MCPX_POOL_CALL_TIMEOUT"))
        self.assertEqual(source.describe(), "env MCPX_POOL_CALL_TIMEOUT")

    def test_flag(self) -> None:
        """A flag overrides the environment, and the flag is the source."""
        settings = resolve(
            config=config({"pool.callTimeout": "30s"}),
            environ={"MCPX_POOL_CALL_TIMEOUT": "45s"},
            flags={"pool.callTimeout": "1m30s"},
        )
        self.assertEqual(settings.value("pool.callTimeout"), 90.0)
        self.assertEqual(
            settings.source("pool.callTimeout"), Source(SourceKind.FLAG, "--pool-call-timeout")
        )

    def test_flag_by_flag_name(self) -> None:
        """Flags may also be keyed by the flag itself."""
        settings = resolve(config=None, environ={}, flags={"--proto-ask-rounds": "3"})
        self.assertEqual(settings.integer("proto.askRounds"), 3)
        self.assertEqual(settings.source("proto.askRounds").kind, SourceKind.FLAG)

    def test_unrelated_environment(self) -> None:
        """Variables without the C{MCPX_} prefix, and the path variables, are left alone."""
        settings = resolve(
            config=None,
            environ={"PATH": "/bin", "MCPX_CONFIG": "/x.json", "MCPX_STATE_DIR": "/s"},
            flags={},
        )
        self.assertEqual(settings.source("pool.callTimeout").kind, SourceKind.DEFAULT)

    def test_typed_readers(self) -> None:
        """The typed readers give each kind's type and refuse a setting of another kind."""
        settings = resolve(config=None, environ={}, flags={})
        self.assertIs(settings.boolean("proto.native"), True)
        self.assertEqual(settings.string("daemon.logLevel"), "info")
        self.assertEqual(settings.strings("daemon.listen"), ("tcp:8899:interface=127.0.0.1",))
        self.assertRaises(TypeError, settings.duration, "daemon.logLevel")


class SpecTests(SynchronousTestCase):
    """The revision settings build the conflict policy."""

    def test_first_from_env(self) -> None:
        """
        C{MCPX_MCP_SPEC=2025-06-18} sets C{spec.first} from the environment, and the
        completed precedence starts with 2025-06-18, the rest newest first.
        """
        settings = resolve(config=None, environ={"MCPX_MCP_SPEC": "2025-06-18"}, flags={})
        self.assertIs(settings.value("spec.first"), Revision.V2025_06_18)
        self.assertEqual(settings.source("spec.first"), Source(SourceKind.ENV, "MCPX_MCP_SPEC"))
        policy = settings.policy()
        self.assertEqual(policy.first(), Revision.V2025_06_18)
        self.assertEqual(
            policy.precedence,
            (Revision.V2025_06_18, *(r for r in NEWEST_FIRST if r is not Revision.V2025_06_18)),
        )

    def test_unknown_first(self) -> None:
        """
        C{MCPX_MCP_SPEC=1999-01-01} is refused, prefixed with where it came from and
        naming the five valid revisions.
        """
        error = self.assertRaises(
            SettingsError,
            resolve,
            config=None,
            environ={"MCPX_MCP_SPEC": "1999-01-01"},
            flags={},
        )
        message = str(error)
        self.assertTrue(message.startswith("MCPX_MCP_SPEC=1999-01-01: unknown MCP revision"))
        for rev in Revision:
            self.assertIn(rev.value, message)

    def test_unknown_in_file(self) -> None:
        """An unknown revision in the file names the file and the setting."""
        error = self.assertRaises(SettingsError, config, {"spec": {"lenient": ["2024-01-01"]}})
        self.assertTrue(
            str(error).startswith(f"{FILE}: setting 'spec.lenient': unknown MCP revision")
        )

    def test_unknown_in_flag(self) -> None:
        """An unknown revision in a flag names the flag."""
        error = self.assertRaises(
            SettingsError, resolve, config=None, environ={}, flags={"spec.first": "next"}
        )
        self.assertTrue(str(error).startswith("--mcp-spec=next: unknown MCP revision"))

    def test_partial_precedence(self) -> None:
        """A partial precedence is completed with the missing revisions, newest first."""
        settings = resolve(
            config=config({"spec.precedence": "2024-11-05,2025-06-18"}), environ={}, flags={}
        )
        self.assertEqual(
            [r.value for r in settings.policy().precedence],
            ["2024-11-05", "2025-06-18", "2026-07-28", "2025-11-25", "2025-03-26"],
        )
        self.assertEqual(
            settings.value("spec.precedence"), (Revision.V2024_11_05, Revision.V2025_06_18)
        )

    def test_lenient(self) -> None:
        """Revisions in C{spec.lenient} are no longer held strictly."""
        settings = resolve(config=None, environ={"MCPX_SPEC_LENIENT": "2026-07-28"}, flags={})
        self.assertFalse(settings.policy().strict(Revision.V2026_07_28))
        self.assertTrue(settings.policy().strict(Revision.V2025_11_25))

    def test_duplicate_precedence(self) -> None:
        """A precedence naming a revision twice is refused, saying where it came from."""
        error = self.assertRaises(
            SettingsError,
            resolve,
            config=None,
            environ={},
            flags={"spec.precedence": "2025-06-18,2025-06-18"},
        )
        self.assertTrue(str(error).startswith("--spec-precedence=2025-06-18,2025-06-18: "))
        self.assertIn("twice", str(error))


class UnknownNameTests(SynchronousTestCase):
    """A name that is no setting is refused wherever it appears."""

    def test_env(self) -> None:
        """A misspelt C{MCPX_} variable is refused, suggesting the closest, and only that:
        the suggestion is not followed by every valid name."""
        error = self.assertRaises(
            SettingsError,
            resolve,
            config=None,
            environ={"MCPX_POOL_CALLTIMEOUT": "5s"},
            flags={},
        )
        message = str(error)
        self.assertIn("'MCPX_POOL_CALLTIMEOUT'", message)
        self.assertTrue(message.endswith("did you mean 'MCPX_POOL_CALL_TIMEOUT'?"), message)
        self.assertNotIn("MCPX_EXEC_TIMEOUT", message)

    def test_file(self) -> None:
        """A misspelt setting in the file is refused, suggesting the closest alone."""
        error = self.assertRaises(SettingsError, config, {"pool": {"calltimeout": "5s"}})
        message = str(error)
        self.assertTrue(message.startswith(f"{FILE}: unknown setting 'pool.calltimeout'"))
        self.assertTrue(message.endswith("did you mean 'pool.callTimeout'?"), message)

    def test_flag(self) -> None:
        """An unknown flag key with no near name is refused, saying where the valid names
        are listed, not listing all of them."""
        error = self.assertRaises(
            SettingsError, resolve, config=None, environ={}, flags={"zzz.qqq": "1s"}
        )
        self.assertIn("unknown setting 'zzz.qqq'", str(error))
        self.assertIn("docs/configuration.md lists the", str(error))
        self.assertNotIn("exec.timeout", str(error))

    def test_lookup(self) -> None:
        """Asking resolved settings for an unknown name is refused with the valid names."""
        settings = resolve(config=None, environ={}, flags={})
        error = self.assertRaises(SettingsError, settings.value, "proto.askRound")
        self.assertIn("did you mean 'proto.askRounds'?", str(error))

    def test_bad_duration_env(self) -> None:
        """A bad duration in the environment names the variable and the accepted forms."""
        error = self.assertRaises(
            SettingsError,
            resolve,
            config=None,
            environ={"MCPX_EXEC_TIMEOUT": "2 minutes"},
            flags={},
        )
        self.assertTrue(str(error).startswith("MCPX_EXEC_TIMEOUT=2 minutes: invalid duration"))
        self.assertIn("1m30s", str(error))
