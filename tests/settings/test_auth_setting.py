"""Tests for the object form of C{daemon.auth} (L{mcpx.settings.oauth_resource})."""

from __future__ import annotations

import json
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.config import ConfigFile, parse_config
from mcpx.settings.declarations import BY_NAME
from mcpx.settings.errors import SettingsError
from mcpx.settings.oauth_resource import Introspection, OAuthResource
from mcpx.settings.resolve import resolve

FILE = "/home/u/.config/mcpx/config.json"
OAUTH: dict[str, Any] = {
    "type": "oauth",
    "issuer": "https://sso.example/realms/tools",
    "audience": "https://mcp.example/mcp",
    "scopes": ["mcp:tools"],
}


def config(auth: object) -> ConfigFile:
    return parse_config({"daemon": {"auth": auth}}, origin=FILE, path=FILE, environ={})


class ObjectFormTests(SynchronousTestCase):
    def test_file(self) -> None:
        """The object in the config file resolves to the resource server's settings."""
        settings = resolve(config=config(OAUTH), environ={}, flags={})
        self.assertEqual(
            settings.value("daemon.auth"),
            OAuthResource(
                issuer="https://sso.example/realms/tools",
                audience="https://mcp.example/mcp",
                scopes=("mcp:tools",),
            ),
        )

    def test_environment(self) -> None:
        """MCPX_DAEMON_AUTH takes the same object, as JSON text."""
        settings = resolve(
            config=None,
            environ={"MCPX_DAEMON_AUTH": json.dumps({**OAUTH, "jwksUri": "https://sso.example/c"})},
            flags={},
        )
        value = settings.value("daemon.auth")
        assert isinstance(value, OAuthResource)
        self.assertEqual(value.jwks_uri, "https://sso.example/c")

    def test_strings_still_work(self) -> None:
        """peer, token and none are read as before."""
        for mode in ("peer", "token", "none"):
            with self.subTest(mode=mode):
                settings = resolve(config=config(mode), environ={}, flags={})
                self.assertEqual(settings.string("daemon.auth"), mode)

    def test_introspection(self) -> None:
        """Introspection's client is read; its secret is masked wherever the value is shown."""
        value = {
            **OAUTH,
            "introspection": {
                "url": "https://sso.example/introspect",
                "clientId": "mcpx",
                "clientSecret": "s3cret",
            },
        }
        parsed = BY_NAME["daemon.auth"].parse_json(value, "daemon.auth")
        assert isinstance(parsed, OAuthResource)
        self.assertEqual(
            parsed.introspection, Introspection("https://sso.example/introspect", "mcpx", "s3cret")
        )
        self.assertNotIn("s3cret", BY_NAME["daemon.auth"].to_text(parsed))
        self.assertNotIn("s3cret", repr(parsed))


class BadObjectTests(SynchronousTestCase):
    def refused(self, value: object) -> str:
        error = self.assertRaises(
            SettingsError, BY_NAME["daemon.auth"].parse_json, value, "daemon.auth"
        )
        return str(error)

    def test_wrong_type(self) -> None:
        self.assertIn('"type": "oauth"', self.refused({**OAUTH, "type": "saml"}))

    def test_missing_audience(self) -> None:
        without = {k: v for k, v in OAUTH.items() if k != "audience"}
        self.assertIn("'audience' is required", self.refused(without))

    def test_unknown_key(self) -> None:
        self.assertIn("unknown key 'audiences'", self.refused({**OAUTH, "audiences": []}))

    def test_plain_http_issuer(self) -> None:
        """An issuer over plain http beyond this machine is refused: its keys could be swapped."""
        message = self.refused({**OAUTH, "issuer": "http://sso.example"})
        self.assertIn("daemon.auth.issuer", message)
        self.assertIn("https", message)

    def test_loopback_http_issuer(self) -> None:
        """A local identity provider may be plain http."""
        parsed = BY_NAME["daemon.auth"].parse_json(
            {**OAUTH, "issuer": "http://127.0.0.1:8080/realms/x"}, "daemon.auth"
        )
        assert isinstance(parsed, OAuthResource)
        self.assertEqual(parsed.issuer, "http://127.0.0.1:8080/realms/x")

    def test_scopes_not_a_list(self) -> None:
        self.assertIn("daemon.auth.scopes", self.refused({**OAUTH, "scopes": "mcp:tools"}))

    def test_introspection_without_secret(self) -> None:
        value = {**OAUTH, "introspection": {"url": "https://sso.example/i", "clientId": "m"}}
        self.assertIn("introspection.clientSecret", self.refused(value))

    def test_bad_json_text(self) -> None:
        """A broken object in the environment says so."""
        error = self.assertRaises(
            SettingsError, BY_NAME["daemon.auth"].parse_text, "{nope", "MCPX_DAEMON_AUTH"
        )
        self.assertIn("MCPX_DAEMON_AUTH", str(error))

    def test_other_choice(self) -> None:
        self.assertIn("choose one of", self.refused("oauth"))
