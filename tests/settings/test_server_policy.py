"""The policy keys of a server entry and of serverDefaults, read from the config file."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.config import parse_config
from mcpx.settings.errors import SettingsError
from mcpx.settings.server_policy import Check, SamplingMode
from mcpx.settings.servers import ServersConfig


def read(data: dict[str, object]) -> ServersConfig:
    return parse_config(data, origin="cfg.json", path=None, environ={}).servers


class PolicySettingsTests(SynchronousTestCase):
    def test_entry_keys(self) -> None:
        servers = read(
            {
                "servers": {
                    "notes": {
                        "command": "x",
                        "validate": {"input": "warn", "output": "enforce"},
                        "tools": {"allow": ["*"], "deny": ["drop_*"], "confirm": ["delete_*"]},
                        "confirmDestructive": True,
                        "sampling": {"mode": "confirm", "maxTokens": 4096, "includeContext": False},
                    }
                }
            }
        )
        policy = servers.policy("notes")
        self.assertEqual(policy.validate_input, Check.WARN)
        self.assertEqual(policy.validate_output, Check.ENFORCE)
        self.assertIsNone(policy.allow)
        self.assertEqual(policy.hidden_by("drop_x"), "tools.deny pattern 'drop_*'")
        self.assertTrue(policy.confirm_destructive)
        self.assertEqual(policy.sampling_mode, SamplingMode.CONFIRM)
        self.assertEqual(policy.sampling_max_tokens, 4096)

    def test_defaults_and_entry_wins(self) -> None:
        servers = read(
            {
                "serverDefaults": {"validate": {"output": "enforce"}, "sampling": {"mode": "deny"}},
                "servers": {
                    "a": {"command": "x"},
                    "b": {
                        "command": "x",
                        "validate": {"input": "off"},
                        "sampling": {"mode": "allow"},
                    },
                },
            }
        )
        self.assertEqual(servers.policy("a").validate_output, Check.ENFORCE)
        self.assertEqual(servers.policy("a").sampling_mode, SamplingMode.DENY)
        self.assertEqual(servers.policy("b").validate_input, Check.OFF)
        self.assertEqual(servers.policy("b").validate_output, Check.ENFORCE)
        self.assertEqual(servers.policy("b").sampling_mode, SamplingMode.ALLOW)

    def test_what_a_policy_can_hide_or_confirm(self) -> None:
        """
        Whether a policy hides any tool or confirms any call is told once, from its own
        settings (a call skips the check when it can neither): every setting that can
        hide or confirm counts, and two policies that differ in them alone differ.
        """
        entries: dict[str, dict[str, object]] = {
            "plain": {},
            "allow": {"tools": {"allow": ["a_*"]}},
            "deny": {"tools": {"deny": ["drop_*"]}},
            "confirm": {"tools": {"confirm": ["delete_*"]}},
            "destructive": {"confirmDestructive": True},
        }
        servers = read(
            {"servers": {name: {"command": "x", **entry} for name, entry in entries.items()}}
        )
        told = {
            name: (servers.policy(name).hides_any, servers.policy(name).confirms_any)
            for name in entries
        }
        self.assertEqual(
            told,
            {
                "plain": (False, False),
                "allow": (True, False),
                "deny": (True, False),
                "confirm": (False, True),
                "destructive": (False, True),
            },
        )
        self.assertNotEqual(servers.policy("plain"), servers.policy("confirm"))
        self.assertEqual(
            servers.policy("plain"), read({"servers": {"p": {"command": "x"}}}).policy("p")
        )

    def test_server_without_policy_gets_defaults(self) -> None:
        policy = read({"servers": {"a": {"url": "https://example.test/mcp"}}}).policy("a")
        self.assertEqual(policy.validate_input, Check.ENFORCE)
        self.assertEqual(policy.validate_output, Check.WARN)
        self.assertEqual(policy.sampling_mode, SamplingMode.ALLOW)

    def test_bad_values_name_the_field(self) -> None:
        cases: list[tuple[dict[str, object], str]] = [
            ({"validate": {"input": "strict"}}, "validate.input"),
            ({"tools": {"deny": "drop_*"}}, "tools.deny"),
            ({"tools": {"hide": []}}, "tools.hide"),
            ({"sampling": {"maxTokens": 0}}, "sampling.maxTokens"),
            ({"confirmDestructive": "yes"}, "confirmDestructive"),
        ]
        for extra, field in cases:
            with self.assertRaises(SettingsError, msg=field) as caught:
                read({"servers": {"a": {"command": "x", **extra}}})
            self.assertIn(f"field {field!r}", str(caught.exception))
            self.assertIn("server 'a'", str(caught.exception))

    def test_bad_defaults_refused(self) -> None:
        with self.assertRaises(SettingsError) as caught:
            read({"serverDefaults": {"command": "x"}, "servers": {}})
        self.assertIn("serverDefaults", str(caught.exception))
