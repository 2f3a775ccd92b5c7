"""Tests for L{mcpx.settings.servers}."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.config import parse_config
from mcpx.settings.errors import SettingsError
from mcpx.settings.server_entry import parse_server
from mcpx.settings.servers import (
    Auth,
    AuthType,
    RemoteServer,
    Scope,
    Secret,
    Server,
    ServersConfig,
    StdioServer,
    passthrough_twice,
    redact_url,
)

FILE = "/home/u/.config/mcpx/config.json"
TOKEN = "ghp_s3cr3t-t0ken"


def server(name: str, entry: object, environ: Mapping[str, str] | None = None) -> Server:
    return parse_server(name, entry, origin=FILE, environ=environ or {})


def refused(test: SynchronousTestCase, name: str, entry: object, **environ: str) -> str:
    """The message of the error reading C{entry} raises."""
    error = test.assertRaises(
        SettingsError, parse_server, name, entry, origin=FILE, environ=environ
    )
    return str(error)


class StdioServerTests(SynchronousTestCase):
    """Servers started as child processes."""

    def test_full(self) -> None:
        """Every stdio field is read."""
        found = server(
            "files",
            {
                "command": "npx",
                "args": ["-y", "server-filesystem"],
                "env": {"LOG": "1"},
                "cwd": "/srv",
                "scope": "client",
            },
        )
        self.assertEqual(
            found,
            StdioServer(
                name="files",
                command="npx",
                args=("-y", "server-filesystem"),
                env={"LOG": Secret("1")},
                cwd="/srv",
                scope=Scope.CLIENT,
            ),
        )
        assert isinstance(found, StdioServer)
        self.assertEqual(found.child_env(), {"LOG": "1"})

    def test_minimal(self) -> None:
        """Only C{command} is required; the scope defaults to shared."""
        found = server("x", {"command": "x-mcp"})
        self.assertEqual(found, StdioServer(name="x", command="x-mcp"))
        self.assertIs(found.scope, Scope.SHARED)

    def test_bad_fields(self) -> None:
        """Wrongly typed fields are refused, naming file, server and field."""
        self.assertEqual(
            refused(self, "x", {"command": "x", "args": "-v"}),
            f"{FILE}: server 'x': field 'args': must be an array of strings",
        )
        self.assertEqual(
            refused(self, "x", {"command": 3}),
            f"{FILE}: server 'x': field 'command': must be a string",
        )
        self.assertEqual(
            refused(self, "x", {"command": "x", "env": {"A": 1}}),
            f"{FILE}: server 'x': field 'env.A': must be a string",
        )
        self.assertIn("field 'scope'", refused(self, "x", {"command": "x", "scope": "global"}))

    def test_unknown_field(self) -> None:
        """A misspelt field is refused, suggesting the right one."""
        message = refused(self, "x", {"command": "x", "arg": []})
        self.assertTrue(message.startswith(f"{FILE}: server 'x': field 'arg': unknown field"))
        self.assertIn("did you mean 'args'?", message)

    def test_host_type(self) -> None:
        """A host's C{type} field is accepted when it agrees, refused when it does not."""
        server("x", {"type": "stdio", "command": "x"})
        self.assertIn("field 'type'", refused(self, "x", {"type": "http", "command": "x"}))

    def test_warm(self) -> None:
        """C{warm} is a count (0 by default); a client-scoped server cannot be warm."""
        self.assertFalse(server("x", {"command": "x"}).warm)
        self.assertFalse(server("x", {"command": "x", "warm": 0}).warm)
        self.assertTrue(server("x", {"command": "x", "warm": 1}).warm)
        self.assertTrue(server("x", {"url": "https://h/mcp", "warm": 2}).warm)
        self.assertIn("field 'warm'", refused(self, "x", {"command": "x", "warm": "yes"}))
        self.assertIn("field 'warm'", refused(self, "x", {"command": "x", "warm": -1}))
        self.assertIn(
            "cannot be warm", refused(self, "x", {"command": "x", "warm": 1, "scope": "client"})
        )

    def test_env_passthrough(self) -> None:
        """
        C{envPassthrough} names variables of the daemon's environment (shown in the
        server's JSON); a name that is not one, or one of mcpx's own, is refused.
        """
        found = server("x", {"command": "x", "envPassthrough": ["AWS_PROFILE", "KUBECONFIG"]})
        assert isinstance(found, StdioServer)
        self.assertEqual(found.env_passthrough, ("AWS_PROFILE", "KUBECONFIG"))
        self.assertEqual(found.redacted()["envPassthrough"], ["AWS_PROFILE", "KUBECONFIG"])
        self.assertEqual(server("x", {"command": "x"}), StdioServer(name="x", command="x"))
        self.assertEqual(
            refused(self, "x", {"command": "x", "envPassthrough": "AWS_PROFILE"}),
            f"{FILE}: server 'x': field 'envPassthrough': must be an array of environment "
            "variable names",
        )
        self.assertIn(
            "field 'envPassthrough[1]': 'A=B' is not an environment variable name",
            refused(self, "x", {"command": "x", "envPassthrough": ["A", "A=B"]}),
        )
        message = refused(self, "x", {"command": "x", "envPassthrough": ["MCPX_STATE_DIR"]})
        self.assertIn("field 'envPassthrough[0]': MCPX_STATE_DIR is mcpx's own", message)
        self.assertIn(
            "field 'envPassthrough'",
            refused(self, "r", {"url": "https://e.x", "envPassthrough": []}),
        )

    def test_env_passthrough_default(self) -> None:
        """
        C{serverDefaults}' C{envPassthrough} is every stdio server's that gives none of
        its own; it is checked as an entry's is, naming C{serverDefaults}.
        """
        config = parse_config(
            {
                "serverDefaults": {
                    "envPassthrough": ["HTTPS_PROXY"],
                    "validate": {"output": "off"},
                },
                "servers": {
                    "plain": {"command": "x"},
                    "own": {"command": "x", "envPassthrough": ["AWS_PROFILE"]},
                    "none": {"command": "x", "envPassthrough": []},
                    "remote": {"url": "https://e.x/mcp"},
                },
            },
            origin=FILE,
            path=FILE,
            environ={},
        )
        servers = config.servers.servers
        passed = {
            name: server.env_passthrough
            for name, server in servers.items()
            if isinstance(server, StdioServer)
        }
        self.assertEqual(passed, {"plain": ("HTTPS_PROXY",), "own": ("AWS_PROFILE",), "none": ()})
        self.assertEqual(config.servers.policy("plain").validate_output.value, "off")
        error = self.assertRaises(
            SettingsError,
            parse_config,
            {"serverDefaults": {"envPassthrough": ["MCPX_CONFIG"]}, "servers": {}},
            origin=FILE,
            path=FILE,
            environ={},
        )
        self.assertIn(
            f"{FILE}: serverDefaults: field 'envPassthrough[0]': MCPX_CONFIG is mcpx's own",
            str(error),
        )

    def test_bad_name(self) -> None:
        """A server name with spaces or slashes is refused."""
        self.assertIn("invalid server name", refused(self, "my server", {"command": "x"}))


class RemoteServerTests(SynchronousTestCase):
    """Servers reached over HTTP."""

    def test_full(self) -> None:
        """Every remote field is read."""
        found = server(
            "gh",
            {"url": "https://example.com/mcp", "headers": {"X-Team": "core"}, "type": "http"},
        )
        self.assertEqual(
            found,
            RemoteServer(
                name="gh", url="https://example.com/mcp", headers={"X-Team": Secret("core")}
            ),
        )
        assert isinstance(found, RemoteServer)
        self.assertEqual(found.request_headers(), {"X-Team": "core"})

    def test_bad_url(self) -> None:
        """A URL that is not http(s) with a host is refused."""
        for url in ["ftp://example.com", "example.com/mcp", "https://"]:
            with self.subTest(url=url):
                self.assertEqual(
                    refused(self, "r", {"url": url}),
                    f"{FILE}: server 'r': field 'url': must be an http:// or https:// URL "
                    "with a host",
                )

    def test_stdio_fields_refused(self) -> None:
        """A stdio field on a remote server is refused."""
        self.assertIn("field 'args'", refused(self, "r", {"url": "https://e.x", "args": []}))


class CommandOrUrlTests(SynchronousTestCase):
    """Exactly one of C{command} and C{url}."""

    def test_both(self) -> None:
        """An entry with both is refused."""
        message = refused(self, "x", {"command": "x", "url": "https://e.x"})
        self.assertTrue(message.startswith(f"{FILE}: server 'x': field 'url': "))
        self.assertIn("not both", message)

    def test_neither(self) -> None:
        """An entry with neither is refused."""
        message = refused(self, "x", {"args": []})
        self.assertTrue(message.startswith(f"{FILE}: server 'x': field 'command': missing"))

    def test_not_object(self) -> None:
        """An entry that is not an object is refused."""
        self.assertIn("must be a JSON object", refused(self, "x", "npx server"))


class AuthTests(SynchronousTestCase):
    """The C{auth} block."""

    def remote(self, auth: object, **environ: str) -> RemoteServer:
        found = server("r", {"url": "https://e.x/mcp?v=1", "auth": auth}, environ)
        assert isinstance(found, RemoteServer)
        return found

    def test_bearer(self) -> None:
        """A bearer token is sent as an C{Authorization} header."""
        found = self.remote({"type": "bearer", "token": TOKEN})
        self.assertEqual(found.auth, Auth(AuthType.BEARER, Secret(TOKEN)))
        self.assertEqual(found.request_headers(), {"Authorization": f"Bearer {TOKEN}"})

    def test_basic(self) -> None:
        """Basic credentials are sent base64-encoded."""
        found = self.remote({"type": "basic", "username": "me", "password": "pw"})
        expected = "Basic " + base64.b64encode(b"me:pw").decode()
        self.assertEqual(found.request_headers(), {"Authorization": expected})

    def test_header(self) -> None:
        """A header credential is sent in the named header."""
        found = self.remote({"type": "header", "name": "X-Api-Key", "value": "k"})
        self.assertEqual(found.request_headers(), {"X-Api-Key": "k"})

    def test_query(self) -> None:
        """A query credential is added to the URL."""
        found = self.remote({"type": "query", "name": "api_key", "value": "a b"})
        self.assertEqual(found.request_url(), "https://e.x/mcp?v=1&api_key=a+b")
        self.assertEqual(found.request_headers(), {})

    def test_env(self) -> None:
        """An env credential goes into a stdio server's child environment."""
        found = server(
            "s",
            {"command": "x", "env": {"A": "1"}, "auth": {"type": "env", "name": "T", "value": "v"}},
        )
        assert isinstance(found, StdioServer)
        self.assertEqual(found.child_env(), {"A": "1", "T": "v"})

    def test_wrong_transport(self) -> None:
        """An env credential on a remote server, or a bearer one on stdio, is refused."""
        message = refused(
            self, "r", {"url": "https://e.x", "auth": {"type": "env", "name": "T", "value": "v"}}
        )
        self.assertIn("field 'auth.type': 'env' does not apply to a remote server", message)
        message = refused(self, "s", {"command": "x", "auth": {"type": "bearer", "token": "t"}})
        self.assertIn("'bearer' does not apply to a stdio server; use env", message)

    def test_unknown_type(self) -> None:
        """An unknown auth type is refused, listing the valid ones."""
        self.assertEqual(
            refused(self, "github", {"url": "https://e.x", "auth": {"type": "oauth2"}}),
            f"{FILE}: server 'github': field 'auth.type': unknown auth type 'oauth2'; "
            "valid types: bearer, basic, header, query, env, oauth",
        )

    def test_oauth_bare(self) -> None:
        """A bare oauth block is accepted: mcpx will discover and register itself."""
        found = server("github", {"url": "https://e.x", "auth": {"type": "oauth"}})
        assert found.auth is not None and found.auth.oauth is not None
        self.assertEqual(found.auth.type, AuthType.OAUTH)
        self.assertEqual(found.auth.oauth.client_id, None)
        self.assertEqual(found.auth.http_headers(), {})
        self.assertEqual(found.auth.redacted(), {"type": "oauth"})

    def test_oauth_fields(self) -> None:
        """clientId, a ${VAR} clientSecret (hidden when shown), metadata URL and scopes."""
        found = server(
            "github",
            {
                "url": "https://e.x",
                "auth": {
                    "type": "oauth",
                    "clientId": "mine",
                    "clientSecret": "${GH_SECRET}",
                    "clientMetadataUrl": "https://me.example/client.json",
                    "scopes": ["repo", "read"],
                },
            },
            {"GH_SECRET": "s3cret-value"},
        )
        assert found.auth is not None and found.auth.oauth is not None
        self.assertEqual(found.auth.secret.reveal(), "s3cret-value")
        self.assertEqual(found.auth.oauth.scopes, ("repo", "read"))
        self.assertEqual(
            found.auth.redacted(),
            {
                "type": "oauth",
                "clientId": "mine",
                "clientSecret": "***",
                "clientMetadataUrl": "https://me.example/client.json",
                "scopes": ["repo", "read"],
            },
        )
        self.assertNotIn("s3cret-value", repr(found))

    def test_oauth_shared(self) -> None:
        """
        "shared": true is kept and shown; it is a boolean, and not for client_credentials
        (whose client serves everyone already).
        """
        found = server("team", {"url": "https://e.x", "auth": {"type": "oauth", "shared": True}})
        assert found.auth is not None and found.auth.oauth is not None
        self.assertTrue(found.auth.oauth.shared)
        self.assertEqual(found.auth.redacted(), {"type": "oauth", "shared": True})
        bare = server("own", {"url": "https://e.x", "auth": {"type": "oauth"}})
        assert bare.auth is not None and bare.auth.oauth is not None
        self.assertFalse(bare.auth.oauth.shared)
        message = refused(
            self, "t", {"url": "https://e.x", "auth": {"type": "oauth", "shared": "yes"}}
        )
        self.assertIn("field 'auth.shared'", message)
        robot = {
            "type": "oauth",
            "grant": "client_credentials",
            "clientId": "robot",
            "clientSecret": "s",
            "shared": True,
        }
        message = refused(self, "t", {"url": "https://e.x", "auth": robot})
        self.assertIn("field 'auth.shared'", message)

    def test_oauth_refused(self) -> None:
        """A secret without a client, an http metadata URL, an unknown field, on stdio."""
        for block, field in [
            ({"clientSecret": "x"}, "auth.clientSecret"),
            ({"clientMetadataUrl": "http://me/c.json"}, "auth.clientMetadataUrl"),
            ({"token": "x"}, "auth.token"),
        ]:
            message = refused(
                self, "gh", {"url": "https://e.x", "auth": {"type": "oauth", **block}}
            )
            self.assertIn(f"field '{field}'", message)
        message = refused(self, "gh", {"command": "x", "auth": {"type": "oauth"}})
        self.assertIn("does not apply to a stdio server", message)

    def test_missing_and_unknown_fields(self) -> None:
        """A missing or unexpected auth field is refused by name."""
        self.assertIn(
            "field 'auth.token': missing",
            refused(self, "r", {"url": "https://e.x", "auth": {"type": "bearer"}}),
        )
        self.assertIn(
            "field 'auth.user': unknown field",
            refused(
                self,
                "r",
                {"url": "https://e.x", "auth": {"type": "bearer", "token": "t", "user": "u"}},
            ),
        )


class ReferenceTests(SynchronousTestCase):
    """C{${NAME}} references are filled in from the environment."""

    def test_resolved(self) -> None:
        """References in auth, headers, env, args and url are replaced."""
        environ = {"TOKEN": TOKEN, "HOST": "e.x", "DIR": "/srv"}
        found = server(
            "r",
            {
                "url": "https://${HOST}/mcp",
                "headers": {"X-Dir": "${DIR}"},
                "auth": {"type": "bearer", "token": "${TOKEN}"},
            },
            environ,
        )
        assert isinstance(found, RemoteServer)
        self.assertEqual(found.url, "https://e.x/mcp")
        self.assertEqual(
            found.request_headers(), {"X-Dir": "/srv", "Authorization": f"Bearer {TOKEN}"}
        )
        stdio = server("s", {"command": "x", "args": ["--root", "${DIR}/a"]}, environ)
        assert isinstance(stdio, StdioServer)
        self.assertEqual(stdio.args, ("--root", "/srv/a"))

    def test_missing(self) -> None:
        """A variable that is not set takes down its server alone: the server is read as
        misconfigured, naming the variable and where to set it, and is never started."""
        github = server(
            "github", {"url": "https://e.x", "auth": {"type": "bearer", "token": "${GH}"}}
        )
        assert github.misconfigured is not None
        self.assertIn("environment variable GH is not set", github.misconfigured)
        self.assertIn(FILE, github.misconfigured)
        fine = server("s", {"command": "x", "args": ["${DIR}"]}, {"DIR": "/srv"})
        self.assertIsNone(fine.misconfigured)

    def test_missing_in_a_url(self) -> None:
        """An unset variable in a remote server's URL makes it misconfigured too, rather than
        an invalid URL that would refuse the whole file."""
        remote = server("r", {"url": "https://${HOST}/mcp"})
        assert remote.misconfigured is not None
        self.assertIn("HOST", remote.misconfigured)

    def test_one_missing_variable_leaves_the_others(self) -> None:
        """In a file, only the server naming the unset variable is misconfigured."""
        found = parse_config(
            {"servers": {"a": {"command": "a", "env": {"K": "${NOPE}"}}, "b": {"command": "b"}}},
            origin=FILE,
            path=FILE,
            environ={},
        ).servers
        self.assertEqual(list(found.misconfigured), ["a"])
        self.assertIn("b", found)

    def test_escape(self) -> None:
        """C{$${} writes a literal C{${}."""
        found = server("s", {"command": "x", "args": ["$${HOME}"]})
        assert isinstance(found, StdioServer)
        self.assertEqual(found.args, ("${HOME}",))

    def test_malformed(self) -> None:
        """An unfinished or invalid reference is refused."""
        for text in ["${HOME", "${}", "${1X}"]:
            with self.subTest(text=text):
                self.assertIn(
                    "field 'args[0]'", refused(self, "s", {"command": "x", "args": [text]})
                )


class RedactionTests(SynchronousTestCase):
    """Secrets never appear in reprs or rendered output."""

    def setUp(self) -> None:
        self.config = parse_config(
            {
                "servers": {
                    "r": {
                        "url": f"https://me:{TOKEN}@e.x/mcp?key={TOKEN}&v",
                        "headers": {"X-Key": TOKEN},
                    },
                    "s": {
                        "command": "x",
                        "env": {"KEY": TOKEN},
                        "auth": {"type": "env", "name": "T", "value": TOKEN},
                    },
                }
            },
            origin=FILE,
            path=FILE,
            environ={},
        )

    def test_repr(self) -> None:
        """The reprs of secrets, auth blocks, servers and the whole config hide every secret."""
        for shown in [
            repr(self.config),
            repr(self.config.servers),
            repr(self.config.servers["r"]),
            repr(self.config.servers["s"]),
            str(Secret(TOKEN)),
            f"{Secret(TOKEN)}",
        ]:
            self.assertNotIn(TOKEN, shown)
            self.assertIn("***", shown)

    def test_redacted_json(self) -> None:
        """The redacted JSON keeps the shape and names but shows every value as C{***}."""
        shown = self.config.servers.redacted()
        self.assertNotIn(TOKEN, json.dumps(shown))
        self.assertEqual(
            shown["r"],
            {
                # The user information became the basic auth block.
                "url": "https://e.x/mcp?key=***&v",
                "headers": {"X-Key": "***"},
                "auth": {"type": "basic", "username": "***", "password": "***"},
                "scope": "shared",
            },
        )
        self.assertEqual(
            shown["s"],
            {
                "command": "x",
                "args": [],
                "env": {"KEY": "***"},
                "auth": {"type": "env", "name": "T", "value": "***"},
                "scope": "shared",
            },
        )

    def test_errors_do_not_echo(self) -> None:
        """An error about a secret field does not repeat the secret."""
        message = refused(self, "r", {"url": "https://e.x", "headers": {"bad name": TOKEN}})
        self.assertNotIn(TOKEN, message)

    def test_redact_url(self) -> None:
        """A URL without credentials is shown as it is."""
        self.assertEqual(redact_url("https://e.x/mcp"), "https://e.x/mcp")


class ToolPrefixTests(SynchronousTestCase):
    """C{toolPrefix}: what pass-through puts before a server's tool names."""

    def test_read_for_both_kinds(self) -> None:
        """A stdio and a remote entry both take a toolPrefix, kept in their JSON."""
        stdio = server("notes", {"command": "notes-mcp", "toolPrefix": "work_"})
        remote = server("web", {"url": "https://example.com/mcp", "toolPrefix": "web."})
        self.assertEqual(stdio.tool_prefix, "work_")
        self.assertEqual(remote.tool_prefix, "web.")
        self.assertEqual(stdio.redacted()["toolPrefix"], "work_")
        self.assertEqual(server("x", {"command": "x"}).tool_prefix, "")

    def test_refused_when_names_would_be_invalid(self) -> None:
        """A prefix that would make invalid tool names is refused, naming the field."""
        for bad in ("", "a b", "x/", 7, "p" * 65):
            message = refused(self, "notes", {"command": "x", "toolPrefix": bad})
            self.assertIn("server 'notes': field 'toolPrefix': must be 1 to 64", message)


class PassthroughTwiceTests(SynchronousTestCase):
    """The same server passed through twice under two names, found at load."""

    def config(self, **entries: object) -> ServersConfig:
        return ServersConfig(
            {name: server(name, entry) for name, entry in entries.items()}, origin=FILE
        )

    def test_same_server_twice_is_refused_naming_both(self) -> None:
        """Two entries alike but for their names, both passed through, are refused."""
        entry = {"command": "notes-mcp", "args": ["--dir", "/srv"]}
        config = self.config(work=entry, home=entry, other={"command": "other-mcp"})
        why = passthrough_twice(config, ["work", "other", "home"])
        assert why is not None
        self.assertIn("'work' and 'home'", why)
        self.assertIn("toolPrefix", why)
        self.assertIn(FILE, why)

    def test_a_prefix_or_one_passed_through_is_fine(self) -> None:
        """With a toolPrefix on one, or only one passed through, there is nothing to refuse."""
        entry = {"command": "notes-mcp"}
        config = self.config(work=entry, home={**entry, "toolPrefix": "home_"}, copy=entry)
        self.assertIsNone(passthrough_twice(config, ["work", "home"]))
        self.assertIsNone(passthrough_twice(config, ["work", "unknown"]))
        self.assertIsNone(passthrough_twice(config, []))
