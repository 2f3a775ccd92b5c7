"""The masker that hides configured credentials in what leaves the daemon."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.errors import SettingsError
from mcpx.settings.secrets import SecretMasker, excerpt
from mcpx.settings.server_entry import parse_server
from mcpx.settings.servers import RemoteServer, ServersConfig


def servers(**entries: object) -> ServersConfig:
    return ServersConfig(
        {
            name: parse_server(name, entry, origin="test", environ={})
            for name, entry in entries.items()
        },
        "test",
    )


TOKEN = "tok-3f9a8b7c6d5e"


class MaskerTests(SynchronousTestCase):
    def test_bearer_token_is_masked_as_written_and_encoded(self) -> None:
        """The token, URL-encoded and JSON-escaped, becomes *** in any text."""
        token = 'tok/with+odd"chars'
        masker = SecretMasker(
            servers(a={"url": "http://h/mcp", "auth": {"type": "bearer", "token": token}})
        )
        for form in (token, quote(token, safe=""), json.dumps(token)[1:-1]):
            self.assertEqual(masker.mask(f"got Bearer {form}!"), "got Bearer ***!")

    def test_basic_auth_masks_the_password_and_the_encoded_pair(self) -> None:
        masker = SecretMasker(
            servers(
                a={
                    "url": "http://h/mcp",
                    "auth": {"type": "basic", "username": "alice", "password": "hunter22"},
                }
            )
        )
        pair = base64.b64encode(b"alice:hunter22").decode()
        self.assertEqual(masker.mask(f"Authorization: Basic {pair}"), "Authorization: Basic ***")
        self.assertEqual(masker.mask("password hunter22 refused"), "password *** refused")

    def test_credential_looking_env_and_headers_are_masked_others_not(self) -> None:
        masker = SecretMasker(
            servers(
                s={"command": "x", "env": {"API_KEY": "k-123456", "MODE": "production"}},
                r={
                    "url": "http://h/mcp?api_key=q-987654&page=large",
                    "headers": {"X-Auth-Token": "h-555555", "Accept": "text/plain"},
                },
            )
        )
        self.assertEqual(masker.mask("k-123456 h-555555 q-987654"), "*** *** ***")
        self.assertEqual(masker.mask("production text/plain large"), "production text/plain large")

    def test_short_values_are_not_masked(self) -> None:
        """A three-character secret would garble every message; it is left alone."""
        masker = SecretMasker(
            servers(a={"url": "http://h/mcp", "auth": {"type": "bearer", "token": "abc"}})
        )
        self.assertFalse(masker)
        self.assertEqual(masker.mask("abc"), "abc")

    def test_overlapping_secrets_are_masked_as_their_union(self) -> None:
        """Neither secret's tail survives where two overlap."""
        masker = SecretMasker(
            servers(
                a={"url": "http://h/mcp", "auth": {"type": "bearer", "token": "foo123bar"}},
                b={"url": "http://h/mcp", "auth": {"type": "bearer", "token": "123barbaz"}},
                c={"url": "http://h/mcp", "auth": {"type": "bearer", "token": "foo123"}},
            )
        )
        self.assertEqual(masker.mask("x foo123barbaz y"), "x *** y")
        self.assertEqual(masker.mask("foo123 and 123barbaz"), "*** and ***")

    def test_no_secrets_leaves_text_and_json_untouched(self) -> None:
        masker = SecretMasker(servers(a={"command": "x"}))
        self.assertFalse(masker)
        value = {"a": ["b", {"c": "d"}]}
        self.assertIs(masker.mask_json(value), value)

    def test_mask_json_masks_nested_strings_and_keys(self) -> None:
        masker = SecretMasker(
            servers(a={"url": "http://h/mcp", "auth": {"type": "bearer", "token": TOKEN}})
        )
        value = {"message": f"no {TOKEN}", "data": [{TOKEN: 1}, 2, None], "same": "x"}
        self.assertEqual(
            masker.mask_json(value),
            {"message": "no ***", "data": [{"***": 1}, 2, None], "same": "x"},
        )
        clean = {"message": "fine", "data": [1]}
        self.assertIs(masker.mask_json(clean), clean)

    def test_reload_adds_the_new_secrets_and_keeps_the_old(self) -> None:
        """After a reload the new token is masked, and the old one still (it may be stopping)."""
        masker = SecretMasker(
            servers(a={"url": "http://h/mcp", "auth": {"type": "bearer", "token": "old-token-1"}})
        )
        self.assertEqual(masker.mask("new-token-2"), "new-token-2")
        masker.learn(
            servers(a={"url": "http://h/mcp", "auth": {"type": "bearer", "token": "new-token-2"}})
        )
        self.assertEqual(masker.mask("old-token-1 new-token-2"), "*** ***")


class UserinfoTests(SynchronousTestCase):
    def test_userinfo_becomes_basic_auth_and_leaves_the_url(self) -> None:
        server = parse_server("a", {"url": "http://me:p%40ss@h:8/mcp"}, origin="test", environ={})
        assert isinstance(server, RemoteServer)
        self.assertEqual(server.url, "http://h:8/mcp")
        pair = base64.b64encode(b"me:p@ss").decode()
        self.assertEqual(server.request_headers(), {"Authorization": f"Basic {pair}"})
        self.assertEqual(SecretMasker(ServersConfig({"a": server}, "t")).mask("p@ss"), "***")

    def test_userinfo_and_an_auth_block_is_a_config_error(self) -> None:
        with self.assertRaises(SettingsError) as caught:
            parse_server(
                "a",
                {"url": "http://me:pw@h/mcp", "auth": {"type": "bearer", "token": "t0k3n"}},
                origin="test",
                environ={},
            )
        self.assertIn(
            "remove the 'user:password@' from the URL, or the auth block", str(caught.exception)
        )


class ExitTests(SynchronousTestCase):
    """The event bus and the log stream mask what passes through them."""

    def setUp(self) -> None:
        self.masker = SecretMasker(
            servers(a={"url": "http://h/mcp", "auth": {"type": "bearer", "token": TOKEN}})
        )

    def test_events_are_masked(self) -> None:
        from twisted.internet.task import Clock

        from mcpx.ops.events import EventBus

        bus = EventBus(Clock(), masker=self.masker)
        seen: list[object] = []
        bus.subscribe(lambda event: seen.append(event.data))
        bus.publish("server.failed", "a", error=f"HTTP 401: Bearer {TOKEN}")
        self.assertEqual(seen, [{"error": "HTTP 401: Bearer ***"}])

    def test_log_lines_are_masked(self) -> None:
        import io

        from twisted.logger import Logger, LogPublisher

        from mcpx.daemon.logs import log_observer

        stream = io.StringIO()
        publisher = LogPublisher(log_observer(stream, "info", self.masker))
        Logger(observer=publisher).warn("upstream said {why}", why=f"no {TOKEN}")
        self.assertNotIn(TOKEN, stream.getvalue())
        self.assertIn("no ***", stream.getvalue())


class ExcerptTests(SynchronousTestCase):
    def test_cut_credential_dropped(self) -> None:
        """
        An upstream's text cut at the limit never ends in the piece of a token the
        masker could not recognise; a text within the limit is kept whole.
        """
        token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
        body = f'{{"error": "invalid_token", "token": "{token}"}}'.encode()
        cut = excerpt(body, 60)
        self.assertEqual(cut, '{"error": "invalid_token", "token": "...')
        self.assertEqual(excerpt(body, len(body)), body.decode())
