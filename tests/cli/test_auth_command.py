"""Tests for L{mcpx.cli.auth_command}: C{mcpx auth login} with and without a browser."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
import webbrowser
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

from click.testing import CliRunner
from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli import auth_command
from mcpx.cli.client import DaemonClient


class LoginTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.posted: list[tuple[str, Any]] = []
        self.patch(DaemonClient, "post", self.fake_post)
        self.runner = CliRunner()

    def fake_post(self, target: str, body: Any, **_: Any) -> Any:
        self.posted.append((target, body))
        if target.endswith("/begin"):
            self.redirect_uri = body["redirect_uri"]
            return {
                "url": "https://as.example/authorize?state=st&redirect_uri=" + body["redirect_uri"],
                "state": "st",
                "issuer": "https://as.example",
            }
        return {
            "server": {"server": "remote", "state": "signed_in", "issuer": "https://as.example"}
        }

    def test_browser_comes_back(self) -> None:
        """The browser's redirect reaches the loopback listener; the daemon gets it."""
        ports: list[int] = []

        def browser(url: str) -> bool:
            # What the authorization server does: send the browser back with a code.
            back = parse_qs(urlsplit(url).query)["redirect_uri"][0]
            ports.append(urlsplit(back).port or 0)
            with urllib.request.urlopen(back + "?code=the-code&state=st", timeout=5) as page:
                self.assertIn(b"close this tab", page.read())
            return True

        self.patch(webbrowser, "open", browser)
        result = self.runner.invoke(auth_command.auth, ["login", "remote"])
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertIn("signed in to remote at https://as.example", result.output)
        self.assertTrue(self.redirect_uri.startswith("http://127.0.0.1:"))
        finish = self.posted[-1]
        self.assertEqual(finish[0], "/v1/auth/remote/finish")
        self.assertEqual(
            finish[1]["url"], f"http://127.0.0.1:{ports[0]}/callback?code=the-code&state=st"
        )
        # The listener is gone once the sign-in ended.
        with socket.socket() as probe:
            self.assertNotEqual(probe.connect_ex(("127.0.0.1", ports[0])), 0)

    def test_stray_requests_do_not_end_the_sign_in(self) -> None:
        """
        A request to the callback without this sign-in's C{state} (another local user's,
        or a page's) is answered 400 and the listener keeps waiting: the browser's own
        redirect, after them, completes the sign-in.
        """
        refused: list[int] = []

        def browser(url: str) -> bool:
            back = parse_qs(urlsplit(url).query)["redirect_uri"][0]
            for stray in ("?code=evil&state=wrong", "?code=evil", "?code=e&state=st&state=x"):
                with self.assertRaises(urllib.error.HTTPError) as raised:
                    urllib.request.urlopen(back + stray, timeout=5)
                refused.append(raised.exception.code)
                raised.exception.close()
            with urllib.request.urlopen(back + "?code=the-code&state=st", timeout=5) as page:
                self.assertIn(b"close this tab", page.read())
            return True

        self.patch(webbrowser, "open", browser)
        result = self.runner.invoke(auth_command.auth, ["login", "remote", "--wait", "30"])
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual(refused, [400, 400, 400])
        self.assertIn("signed in to remote at https://as.example", result.output)
        target, body = self.posted[-1]
        self.assertEqual(target, "/v1/auth/remote/finish")
        self.assertTrue(body["url"].endswith("/callback?code=the-code&state=st"), body)

    def test_no_browser_paste(self) -> None:
        """--no-browser prints the URL and sends the pasted address to the daemon."""
        opened: list[str] = []
        self.patch(webbrowser, "open", opened.append)
        pasted = "http://127.0.0.1:1/callback?code=c&state=st"
        result = self.runner.invoke(
            auth_command.auth, ["login", "remote", "--no-browser"], input=pasted + "\n"
        )
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual(opened, [])
        self.assertIn("https://as.example/authorize?state=st", result.output)
        self.assertEqual(self.posted[-1], ("/v1/auth/remote/finish", {"url": pasted}))

    def test_browser_never_returns(self) -> None:
        """No redirect within --wait: exit non-zero, saying what to do."""
        self.patch(webbrowser, "open", lambda url: True)
        result = self.runner.invoke(auth_command.auth, ["login", "remote", "--wait", "0.1"])
        self.assertNotEqual(result.exit_code, 0)
        self.assertIn("--no-browser", result.output)
        self.assertEqual([target for target, _ in self.posted], ["/v1/auth/remote/begin"])


class LogoutTests(SynchronousTestCase):
    def test_failed_revocation_is_a_warning(self) -> None:
        """A revocation the daemon reports as failed is a warning; the sign-out stands."""
        opened: list[tuple[str, str]] = []
        answer = {"server": "remote", "forgotten": 1, "warnings": ["as.example did not revoke"]}

        class Answered:
            def json(self) -> Any:
                return answer

        @contextmanager
        def fake_open(_: DaemonClient, method: str, target: str, **__: Any) -> Iterator[Any]:
            opened.append((method, target))
            yield Answered()

        self.patch(DaemonClient, "open", fake_open)
        result = CliRunner().invoke(auth_command.auth, ["logout", "remote"])
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual(opened, [("DELETE", "/v1/auth/remote")])
        self.assertIn("warning: as.example did not revoke", result.stderr)
        self.assertIn("forgot the sign-in to remote", result.stdout)
