"""Tests for L{mcpx.settings.declarations} and L{mcpx.settings.kinds}."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.declarations import BY_NAME, SETTINGS, env_name, flag_name
from mcpx.settings.errors import SettingsError
from mcpx.settings.kinds import Kind
from mcpx.spec.revision import NEWEST_FIRST, Revision


class NamingTests(SynchronousTestCase):
    """Variables and flags are derived from the dotted names."""

    def test_env_name(self) -> None:
        """Dots and camelCase boundaries become underscores, in upper case, after C{MCPX_}."""
        self.assertEqual(env_name("pool.callTimeout"), "MCPX_POOL_CALL_TIMEOUT")
        self.assertEqual(env_name("proto.stateTTL"), "MCPX_PROTO_STATE_TTL")
        self.assertEqual(env_name("protoMessages.listMaxAge"), "MCPX_PROTO_MESSAGES_LIST_MAX_AGE")

    def test_flag_name(self) -> None:
        """The same words, in lower case, joined by dashes."""
        self.assertEqual(flag_name("pool.callTimeout"), "--pool-call-timeout")
        self.assertEqual(flag_name("transport.sseKeepAlive"), "--transport-sse-keep-alive")
        self.assertEqual(flag_name("proto.askTTL"), "--proto-ask-ttl")

    def test_declared_exceptions(self) -> None:
        """C{spec.first} and C{mcp.passthrough} keep their established spellings."""
        self.assertEqual(BY_NAME["spec.first"].env, "MCPX_MCP_SPEC")
        self.assertEqual(BY_NAME["spec.first"].flag, "--mcp-spec")
        self.assertEqual(BY_NAME["mcp.passthrough"].env, "MCPX_MCP_PASSTHROUGH")
        self.assertEqual(BY_NAME["mcp.passthrough"].flag, "--passthrough")

    def test_unique(self) -> None:
        """No two settings share a name, a variable, a flag or a click parameter."""
        for attribute in ["name", "env", "flag", "param"]:
            values = [getattr(setting, attribute) for setting in SETTINGS]
            self.assertEqual(len(values), len(set(values)), attribute)

    def test_every_setting_explained(self) -> None:
        """Every setting has help text that is one or two sentences a user can read."""
        for setting in SETTINGS:
            with self.subTest(setting=setting.name):
                self.assertTrue(setting.help.endswith("."))
                self.assertLessEqual(setting.help.count(". "), 2)


class DefaultTests(SynchronousTestCase):
    """The built-in defaults are the documented ones, and are valid values."""

    def test_defaults_round_trip(self) -> None:
        """Every default, written as text, reads back as itself."""
        for setting in SETTINGS:
            with self.subTest(setting=setting.name):
                text = setting.to_text(setting.default)
                self.assertEqual(setting.parse_text(text, "test"), setting.default)

    def test_documented_defaults(self) -> None:
        """The defaults are the ones the design names."""
        expected = {
            "spec.precedence": NEWEST_FIRST,
            "spec.lenient": (),
            "spec.first": None,
            "pool.callTimeout": 60.0,
            "pool.idleTimeout": 600.0,
            "proto.native": True,
            "proto.askTimeout": 600.0,
            "proto.askRounds": 8,
            "proto.stateTTL": 1800.0,
            "proto.askTTL": 900.0,
            "protoMessages.listMaxAge": 60.0,
            "protoMessages.readMaxAge": 0.0,
            "transport.maxMessageSize": 64 * 1024 * 1024,
            "exec.timeout": 120.0,
            "daemon.listen": ("tcp:8899:interface=127.0.0.1",),
            "daemon.logLevel": "info",
        }
        for name, value in expected.items():
            with self.subTest(setting=name):
                self.assertEqual(BY_NAME[name].default, value)


class KindTests(SynchronousTestCase):
    """Each kind reads its own values and refuses others, saying where from."""

    def test_integer_minimum(self) -> None:
        """An integer below the setting's minimum is refused, naming the minimum."""
        setting = BY_NAME["proto.askRounds"]
        self.assertEqual(setting.parse_text("3", "here"), 3)
        error = self.assertRaises(SettingsError, setting.parse_text, "0", "here")
        self.assertEqual(str(error), "here: 0 is too small; the smallest allowed is 1")
        self.assertRaises(SettingsError, setting.parse_text, "eight", "here")

    def test_boolean(self) -> None:
        """Booleans accept the usual spellings and refuse anything else."""
        setting = BY_NAME["proto.native"]
        for text, value in [("true", True), ("OFF", False), ("1", True), ("no", False)]:
            self.assertIs(setting.parse_text(text, "here"), value)
        self.assertRaises(SettingsError, setting.parse_text, "maybe", "here")

    def test_choice(self) -> None:
        """A choice outside the list is refused, listing the choices."""
        setting = BY_NAME["daemon.logLevel"]
        self.assertEqual(setting.parse_text("debug", "here"), "debug")
        error = self.assertRaises(SettingsError, setting.parse_text, "verbose", "here")
        self.assertIn("debug, info, warn, error", str(error))

    def test_lists(self) -> None:
        """Lists are comma-separated, with spaces and empty items ignored."""
        setting = BY_NAME["mcp.passthrough"]
        self.assertEqual(setting.parse_text(" demo, tasks ,", "here"), ("demo", "tasks"))
        self.assertEqual(setting.parse_text("", "here"), ())

    def test_revision_list(self) -> None:
        """A revision list reads revisions and refuses an unknown one, listing all five."""
        setting = BY_NAME["spec.lenient"]
        self.assertEqual(setting.parse_text("2025-06-18", "here"), (Revision.V2025_06_18,))
        error = self.assertRaises(SettingsError, setting.parse_text, "2025-06-18,1999", "here")
        self.assertTrue(str(error).startswith("here: unknown MCP revision '1999'"))
        for rev in Revision:
            self.assertIn(rev.value, str(error))

    def test_endpoints(self) -> None:
        """Endpoint strings must start with their type."""
        setting = BY_NAME["daemon.listen"]
        self.assertEqual(
            setting.parse_text("tcp:1:interface=::1,unix:/tmp/s", "here"),
            ("tcp:1:interface=::1", "unix:/tmp/s"),
        )
        error = self.assertRaises(SettingsError, setting.parse_text, "8899", "here")
        self.assertIn("tcp:8899:interface=127.0.0.1", str(error))

    def test_json_values(self) -> None:
        """The config file may use JSON arrays, numbers and booleans where they fit."""
        self.assertEqual(
            BY_NAME["spec.precedence"].parse_json(["2025-06-18"], "f"), (Revision.V2025_06_18,)
        )
        self.assertEqual(BY_NAME["proto.askRounds"].parse_json(4, "f"), 4)
        self.assertIs(BY_NAME["proto.native"].parse_json(False, "f"), False)
        self.assertIsNone(BY_NAME["spec.first"].parse_json(None, "f"))
        self.assertEqual(BY_NAME["pool.callTimeout"].parse_json("2m", "f"), 120.0)

    def test_json_bare_number_duration(self) -> None:
        """A duration given as a bare JSON number is refused, suggesting a unit."""
        error = self.assertRaises(
            SettingsError, BY_NAME["pool.callTimeout"].parse_json, 30, "f: setting"
        )
        self.assertIn('"30s"', str(error))

    def test_json_wrong_type(self) -> None:
        """A JSON value of the wrong type is refused, saying what was expected."""
        error = self.assertRaises(SettingsError, BY_NAME["proto.askRounds"].parse_json, True, "f")
        self.assertEqual(str(error), "f: expected a whole number, not a boolean")
        self.assertRaises(SettingsError, BY_NAME["mcp.passthrough"].parse_json, [1], "f")

    def test_kinds_closed(self) -> None:
        """Every declared setting uses one of the kinds, each with a metavar."""
        for setting in SETTINGS:
            self.assertIn(setting.kind, list(Kind))
            self.assertTrue(setting.kind.metavar)
