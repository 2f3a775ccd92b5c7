# -*- test-case-name: tests.cli.test_auth_command -*-
"""
C{mcpx auth}: sign in to OAuth servers (C{login}), see the sign-ins (C{status}), forget
them (C{logout}).

C{login} asks the daemon to begin (C{POST /v1/auth/NAME/begin}), opens the URL it
answers with the user's browser through L{webbrowser} (so C{$BROWSER} is honoured), and
listens on 127.0.0.1, on a free port and only until the sign-in ends, for the browser
to come back.  Any local user can reach that port, so a request whose C{state} is not
this sign-in's is answered 400 and the wait goes on: a stray or hostile request cannot
end the owner's sign-in.  The daemon checks the redirect's C{state} again and does the
exchange
(C{POST /v1/auth/NAME/finish}): the tokens never pass through this process.  With
C{--no-browser} the URL is printed and the address the browser ended on is read back
from the terminal, for a machine without a browser.
"""

from __future__ import annotations

import threading
import webbrowser
from hmac import compare_digest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import click

from mcpx.cli.client import DaemonClient
from mcpx.cli.commands import asks_the_daemon, echo_json
from mcpx.cli.terminal import echo
from mcpx.ops import routes

#: How long C{login} waits for the browser to come back, by default, in seconds.
DEFAULT_WAIT = 300.0

#: What the loopback listener says with a refusal.
_REFUSED = {400: "this is not the sign-in's state", 404: None}

#: How long the loopback listener waits for a request on a connection, in seconds.
_REQUEST_TIMEOUT = 10.0

_DONE_PAGE = (
    b"<!doctype html><meta charset=utf-8><title>mcpx</title>"
    b"<p>mcpx received the sign-in. You can close this tab.</p>"
)


class _Callback:
    """
    The loopback listener: remembers the first request to C{/callback} that carries
    this sign-in's C{state} (L{expect}); any other is answered 400.
    """

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.path = ""
        self.state = ""
        lock = threading.Lock()
        callback = self

        class Handler(BaseHTTPRequestHandler):
            # A connection that sends nothing is dropped, and holds up no other.
            timeout = _REQUEST_TIMEOUT

            def do_GET(self) -> None:
                with lock:
                    if urlsplit(self.path).path != "/callback" or callback.path:
                        status = 404
                    elif not callback.ours(self.path):
                        status = 400
                    else:
                        status = 200
                        callback.path = self.path
                if status != 200:
                    self.send_error(status, _REFUSED.get(status))
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(_DONE_PAGE)))
                self.end_headers()
                self.wfile.write(_DONE_PAGE)
                callback.arrived.set()

            def log_message(self, format: str, *args: Any) -> None:
                # The query carries the authorization code: it is not printed.
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    def expect(self, state: str) -> None:
        """The C{state} of this sign-in, which the browser's redirect must carry."""
        self.state = state

    def ours(self, path: str) -> bool:
        """Whether the request for C{path} carries this sign-in's C{state}, and only it."""
        given = parse_qs(urlsplit(path).query).get("state", [])
        expected = self.state.encode()
        return bool(expected) and len(given) == 1 and compare_digest(given[0].encode(), expected)

    def __enter__(self) -> _Callback:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _state_of(url: str) -> str:
    """The C{state} of an authorization URL, or empty."""
    return parse_qs(urlsplit(url).query).get("state", [""])[0]


@click.group("auth")
def auth() -> None:
    """Sign in to servers that use OAuth, and see or forget the sign-ins."""


@asks_the_daemon("login")
@click.argument("server")
@click.option(
    "--no-browser",
    is_flag=True,
    help="Print the URL instead of opening a browser, and read back the address the "
    "browser ended on.",
)
@click.option(
    "--wait",
    type=float,
    default=DEFAULT_WAIT,
    show_default=True,
    help="Seconds to wait for the browser to come back.",
)
def login(client: DaemonClient, as_json: bool, server: str, no_browser: bool, wait: float) -> None:
    """Sign in to SERVER; exits 0 once the daemon holds a token."""
    with _Callback() as callback:
        begun = client.post(
            routes.path("auth_begin", name=server),
            {"redirect_uri": callback.redirect_uri},
            timeout=120.0,
        )
        url = begun["url"]
        callback.expect(begun.get("state") or _state_of(url))
        if no_browser:
            echo(f"Open this URL in a browser to sign in to {server}:\n\n  {url}\n", err=True)
            returned = click.prompt("Then paste the address the browser ended on", err=True).strip()
        else:
            echo(f"Opening the browser to sign in to {server} ...", err=True)
            if not webbrowser.open(url):
                echo(f"No browser could be opened; open this URL:\n\n  {url}\n", err=True)
            if not callback.arrived.wait(wait):
                raise click.ClickException(
                    f"the browser did not come back within {wait:g}s; run "
                    f"`mcpx auth login {server}` again, or with --no-browser"
                )
            returned = callback.redirect_uri.rsplit("/callback", 1)[0] + callback.path
    finished = client.post(
        routes.path("auth_finish", name=server), {"url": returned}, timeout=120.0
    )
    if as_json:
        echo_json(finished)
        return
    state = finished.get("server", {})
    echo(f"signed in to {server} at {state.get('issuer', '?')}")


@asks_the_daemon("status")
def status(client: DaemonClient, as_json: bool) -> None:
    """Show each OAuth server's sign-in (never a token)."""
    answer = client.get(routes.path("auth_status"))
    if as_json:
        echo_json(answer)
        return
    servers = answer.get("servers", [])
    if not servers:
        echo('no server uses OAuth (give one "auth": {"type": "oauth"})')
    for shown in servers:
        line = f"{shown['server']}: {shown['state'].replace('_', ' ')}"
        if shown.get("issuer"):
            line += f", issuer {shown['issuer']}"
        if shown.get("scopes"):
            line += f", scopes {' '.join(shown['scopes'])}"
        if shown.get("expires_at") is not None:
            line += f", expires at {shown['expires_at']:.0f}"
        if shown.get("scopes_refused"):
            line += f", refused for lack of scope {' '.join(shown['scopes_refused'])}"
        if shown["state"] == "needs_sign_in":
            if shown.get("required_scopes"):
                line += f"; sign in with scopes {' '.join(shown['required_scopes'])}"
            line += f"; run `mcpx auth login {shown['server']}`"
        echo(line)


@asks_the_daemon("logout")
@click.argument("server")
def logout(client: DaemonClient, as_json: bool, server: str) -> None:
    """Forget SERVER's tokens and registered clients, revoking the tokens where offered."""
    with client.open("DELETE", routes.path("auth_logout", name=server)) as response:
        answer = response.json()
    if as_json:
        echo_json(answer)
        return
    for warning in answer.get("warnings", []):
        echo(f"warning: {warning}", err=True)
    echo(f"forgot the sign-in to {server}")


auth.add_command(login)
auth.add_command(status)
auth.add_command(logout)
