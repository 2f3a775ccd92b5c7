# -*- test-case-name: tests.settings.test_servers -*-
"""
The upstream servers named in the config file.

A server is either started as a child process and spoken to over stdio
(L{StdioServer}: C{command}, C{args}, C{env}, C{cwd}) or reached over HTTP
(L{RemoteServer}: C{url}, C{headers}); an entry gives exactly one of C{command}
and C{url}.  Either may carry an C{auth} block (L{Auth}) and a C{scope}.

String values may refer to environment variables as C{${NAME}}; they are filled in
when the file is read, from the environment mcpx was started with, and a variable
that is not set is an error naming it.  C{$${} stands for a literal C{${}.

Credentials are held as L{Secret}s, whose C{repr} and C{str} are C{***}, and every
C{repr} here goes through L{StdioServer.redacted}/L{RemoteServer.redacted}, so a
server can be logged or printed without leaking what it was configured with.

An entry of the file is read by L{mcpx.settings.server_entry.parse_server}.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Iterator, Mapping, Sequence
from typing import Final, TypeAlias
from urllib.parse import urlencode, urlsplit, urlunsplit

from attrs import evolve, field, frozen

from mcpx.settings.server_policy import DEFAULT_POLICY, ServerPolicy

#: What every redacted value is shown as.
REDACTED = "***"


@frozen(repr=False)
class Secret:
    """
    A string that must not be shown: a token, a password, a header or variable value.

    Its C{str} and C{repr} are C{***}; L{reveal} is the one way to the value, so
    every place a secret leaves mcpx is a call somebody can search for.
    """

    _value: str = field(alias="value")

    def reveal(self) -> str:
        """The secret itself, for the one place that has to send it."""
        return self._value

    def __repr__(self) -> str:
        return repr(REDACTED)

    def __str__(self) -> str:
        return REDACTED


class Scope(enum.Enum):
    """Who shares a running instance of a server."""

    #: One instance serves every client.
    SHARED = "shared"
    #: Each client gets its own instance.
    CLIENT = "client"


class AuthType(enum.Enum):
    """How a server's credential is presented."""

    BEARER = "bearer"
    BASIC = "basic"
    HEADER = "header"
    QUERY = "query"
    ENV = "env"
    #: mcpx signs in itself (L{mcpx.auth}); every field is optional.
    OAUTH = "oauth"


#: The grant of an C{oauth} block for machine-to-machine use: nobody signs in.
CLIENT_CREDENTIALS: Final = "client_credentials"

#: The fields each auth type takes besides C{type}, in the order they are shown.
AUTH_FIELDS: Mapping[AuthType, tuple[str, ...]] = {
    AuthType.BEARER: ("token",),
    AuthType.BASIC: ("username", "password"),
    AuthType.HEADER: ("name", "value"),
    AuthType.QUERY: ("name", "value"),
    AuthType.ENV: ("name", "value"),
    AuthType.OAUTH: (
        "clientId",
        "clientSecret",
        "privateKeyFile",
        "signingAlgorithm",
        "clientMetadataUrl",
        "scopes",
        "grant",
        "shared",
    ),
}


@frozen(repr=False)
class Auth:
    """
    A credential for one server.

    @ivar name: the header, query parameter or environment variable it is put in
        (C{header}, C{query}, C{env}); empty for the others.
    @ivar username: the user name, for C{basic} only.
    @ivar secret: the token, password or value (for C{oauth}, the client secret, or
        empty).
    @ivar oauth: the rest of an C{oauth} block.
    """

    type: AuthType
    secret: Secret
    name: str = ""
    username: Secret | None = None
    oauth: OAuthSettings | None = None

    def http_headers(self) -> dict[str, str]:
        """The headers that carry this credential on an HTTP request."""
        if self.type is AuthType.BEARER:
            return {"Authorization": f"Bearer {self.secret.reveal()}"}
        if self.type is AuthType.BASIC:
            assert self.username is not None
            pair = f"{self.username.reveal()}:{self.secret.reveal()}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
        if self.type is AuthType.HEADER:
            return {self.name: self.secret.reveal()}
        return {}

    def query_params(self) -> dict[str, str]:
        """The query parameters that carry this credential on an HTTP request."""
        return {self.name: self.secret.reveal()} if self.type is AuthType.QUERY else {}

    def child_env(self) -> dict[str, str]:
        """The variables that carry this credential into a child process."""
        return {self.name: self.secret.reveal()} if self.type is AuthType.ENV else {}

    def redacted(self) -> dict[str, object]:
        """The auth block as JSON, every credential replaced by C{***}."""
        if self.oauth is not None:
            return self.oauth.shown(bool(self.secret.reveal()))
        shown: dict[str, object] = {"type": self.type.value}
        for key in AUTH_FIELDS[self.type]:
            shown[key] = self.name if key == "name" else REDACTED
        return shown

    def __repr__(self) -> str:
        return f"Auth({self.redacted()!r})"


@frozen(repr=False)
class ClientKey:
    """
    The private key of an C{oauth} block's C{"privateKeyFile"} and the JWS algorithm
    it signs client assertions with (read by L{mcpx.settings.client_key}).

    @ivar path: the file it was read from (shown; the key is not).
    @ivar pem: the PEM text.
    """

    path: str
    pem: Secret
    algorithm: str

    def __repr__(self) -> str:
        return f"ClientKey({self.path!r}, {self.algorithm!r})"


@frozen
class OAuthSettings:
    """
    What an C{oauth} auth block configures; with nothing set mcpx discovers the
    authorization server and registers itself.

    @ivar client_id: a client registered beforehand, used before any other.
    @ivar metadata_url: a client ID metadata document URL, used as the client id where
        the authorization server supports them.
    @ivar scopes: the scopes to ask for instead of those the server suggests.
    @ivar grant: C{authorization_code} (someone signs in) or C{client_credentials}
        (the daemon obtains and renews its token with C{client_id} and the secret,
        or a JWT assertion signed with C{private_key}).
    @ivar private_key: the key of C{"privateKeyFile"}, for C{private_key_jwt}.
    @ivar shared: whether the owner's sign-in serves every caller (C{"shared": true});
        otherwise (the default) each caller let in with an access token signs in for
        itself (L{mcpx.auth.signin}).
    """

    client_id: str | None = None
    metadata_url: str | None = None
    scopes: tuple[str, ...] = ()
    grant: str = "authorization_code"
    private_key: ClientKey | None = None
    shared: bool = False

    @property
    def client_credentials(self) -> bool:
        return self.grant == CLIENT_CREDENTIALS

    def shown(self, has_secret: bool) -> dict[str, object]:
        shown: dict[str, object] = {"type": AuthType.OAUTH.value}
        if self.client_id is not None:
            shown["clientId"] = self.client_id
        if has_secret:
            shown["clientSecret"] = REDACTED
        if self.private_key is not None:
            shown["privateKeyFile"] = self.private_key.path
            shown["signingAlgorithm"] = self.private_key.algorithm
        if self.metadata_url is not None:
            shown["clientMetadataUrl"] = self.metadata_url
        if self.scopes:
            shown["scopes"] = list(self.scopes)
        if self.client_credentials:
            shown["grant"] = self.grant
        if self.shared:
            shown["shared"] = True
        return shown


def _reveal_all(
    values: Mapping[str, Secret], credentials: Mapping[str, str] | None = None
) -> dict[str, str]:
    """C{values} revealed, with the C{credentials} of a server's C{auth} over them."""
    revealed = {key: value.reveal() for key, value in values.items()}
    revealed.update(credentials or {})
    return revealed


def _redact_all(values: Mapping[str, Secret]) -> dict[str, str]:
    return dict.fromkeys(values, REDACTED)


def redact_url(url: str) -> str:
    """
    A URL with its user information and query values replaced by C{***}.

    Remote MCP endpoints often carry an API key in the query, so the query is
    hidden value by value, leaving the parameter names readable.
    """
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED + "@" + netloc.rsplit("@", 1)[1]
    query = "&".join(
        item.split("=", 1)[0] + "=" + REDACTED if "=" in item else item
        for item in parts.query.split("&")
        if item
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _with_common(
    server: Server, shown: dict[str, object], tls: Mapping[str, str] | None = None
) -> dict[str, object]:
    """C{shown}, a server's own fields, followed by those every kind of server has."""
    if server.auth is not None:
        shown["auth"] = server.auth.redacted()
    shown["scope"] = server.scope.value
    if tls is not None:
        shown["tls"] = tls
    if server.warm:
        shown["warm"] = 1
    if server.tool_prefix:
        shown["toolPrefix"] = server.tool_prefix
    if server.protocol:
        shown["protocol"] = server.protocol
    return shown


def _server_repr(server: Server) -> str:
    """A server's repr, as its config-file JSON with every secret shown as C{***}."""
    return f"{type(server).__name__}({server.name!r}, {server.redacted()!r})"


@frozen(repr=False)
class StdioServer:
    """
    A server mcpx starts as a child process and speaks to over stdin and stdout.

    @ivar env: variables added to the child's environment.
    @ivar env_passthrough: the names of the daemon's variables the child is given
        besides those every server gets (C{envPassthrough};
        L{mcpx.upstream.stdio_spawn.child_environment}).
    @ivar cwd: the directory it starts in, or C{None} for the user's home directory.
    @ivar tool_prefix: put before each of its tool names in pass-through (C{toolPrefix}).
    @ivar protocol: the era (C{legacy}, C{modern}) or revision it is spoken to in, or
        C{""} to find out by probing (C{protocol}).
    """

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, Secret] = field(factory=dict)
    cwd: str | None = None
    auth: Auth | None = None
    scope: Scope = Scope.SHARED
    #: Started with the daemon and kept running.  Left out of equality, so that a reload
    #: which only turns it on or off keeps the running instance.
    warm: bool = field(default=False, eq=False)
    tool_prefix: str = ""
    env_passthrough: tuple[str, ...] = ()
    #: Why it cannot start as configured (a C{${NAME}} the environment lacks), or C{None}.
    misconfigured: str | None = None
    protocol: str = ""

    def child_env(self) -> dict[str, str]:
        """The variables to add to the child's environment, credentials included."""
        return _reveal_all(self.env, None if self.auth is None else self.auth.child_env())

    def redacted(self) -> dict[str, object]:
        """This server as config-file JSON, with every secret shown as C{***}."""
        shown: dict[str, object] = {
            "command": self.command,
            "args": list(self.args),
            "env": _redact_all(self.env),
        }
        if self.env_passthrough:
            shown["envPassthrough"] = list(self.env_passthrough)
        if self.cwd is not None:
            shown["cwd"] = self.cwd
        return _with_common(self, shown)

    __repr__ = _server_repr


@frozen
class Tls:
    """
    How mcpx checks a remote server's certificate and shows its own.

    @ivar ca: a PEM file of the certificate authorities to trust for this server,
        instead of the system's.
    @ivar cert: a PEM file with mcpx's client certificate (mutual TLS); its private key
        too, unless C{key} names another file.
    @ivar key: the PEM file of the client certificate's private key.
    @ivar server_name: the name the server's certificate must carry (and that is sent
        as SNI), when it is not the URL's host.
    """

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None

    def shown(self) -> dict[str, str]:
        """As config-file JSON (paths and names are not secrets)."""
        fields = {"ca": self.ca, "cert": self.cert, "key": self.key, "serverName": self.server_name}
        return {name: value for name, value in fields.items() if value is not None}


@frozen(repr=False)
class RemoteServer:
    """
    A server mcpx reaches over HTTP at C{url}.

    @ivar tool_prefix: put before each of its tool names in pass-through (C{toolPrefix}).
    @ivar protocol: as L{StdioServer.protocol}.
    """

    name: str
    url: str
    headers: Mapping[str, Secret] = field(factory=dict)
    auth: Auth | None = None
    scope: Scope = Scope.SHARED
    tls: Tls | None = None
    #: As L{StdioServer.warm}.
    warm: bool = field(default=False, eq=False)
    tool_prefix: str = ""
    #: As L{StdioServer.misconfigured}.
    misconfigured: str | None = None
    protocol: str = ""

    def request_headers(self) -> dict[str, str]:
        """The headers to send on every request, credentials included."""
        return _reveal_all(self.headers, None if self.auth is None else self.auth.http_headers())

    def request_url(self) -> str:
        """The URL to send requests to, with a C{query} credential added."""
        params = self.auth.query_params() if self.auth is not None else {}
        if not params:
            return self.url
        parts = urlsplit(self.url)
        query = "&".join(item for item in (parts.query, urlencode(params)) if item)
        return urlunsplit(parts._replace(query=query))

    def redacted(self) -> dict[str, object]:
        """This server as config-file JSON, with every secret shown as C{***}."""
        shown: dict[str, object] = {
            "url": redact_url(self.url),
            "headers": _redact_all(self.headers),
        }
        return _with_common(self, shown, None if self.tls is None else self.tls.shown())

    __repr__ = _server_repr


Server: TypeAlias = StdioServer | RemoteServer


@frozen(repr=False)
class ServersConfig:
    """
    The configured servers, in the order the file gives them.

    @ivar origin: where they came from: the config file's path, or
        C{"default config"} for the configuration shipped with mcpx.
    @ivar path: the config file's path, or C{None} when there was no file.
    @ivar policies: each server's policy (L{mcpx.settings.server_policy}), kept apart from the
        server so that changing it does not restart the server.
    @ivar notes: what the file had that was ignored (a host's own keys), for the log.
    """

    servers: Mapping[str, Server]
    origin: str
    path: str | None = None
    policies: Mapping[str, ServerPolicy] = field(factory=dict)
    notes: tuple[str, ...] = field(default=(), eq=False)

    @property
    def misconfigured(self) -> dict[str, str]:
        """The servers that cannot start as configured, with why."""
        return {
            name: server.misconfigured
            for name, server in self.servers.items()
            if server.misconfigured is not None
        }

    def policy(self, name: str) -> ServerPolicy:
        """C{name}'s policy (the defaults when its entry and C{serverDefaults} give none)."""
        return self.policies.get(name, DEFAULT_POLICY)

    def __getitem__(self, name: str) -> Server:
        return self.servers[name]

    def __contains__(self, name: object) -> bool:
        return name in self.servers

    def __iter__(self) -> Iterator[str]:
        return iter(self.servers)

    def __len__(self) -> int:
        return len(self.servers)

    def redacted(self) -> dict[str, dict[str, object]]:
        """Every server as config-file JSON, secrets shown as C{***}."""
        return {name: server.redacted() for name, server in self.servers.items()}

    def __repr__(self) -> str:
        return f"ServersConfig({self.origin!r}, {self.redacted()!r})"


def passthrough_twice(servers: ServersConfig, passed: Sequence[str]) -> str | None:
    """
    Why passing C{passed} through cannot work, or C{None}: two of them are the same
    server (the same entry under two names) and neither has a C{toolPrefix}, so every
    tool of the second would clash with the first's.
    """
    # Compared by equality: entries hold mappings, so they cannot be hashed.
    seen: list[tuple[Server, str]] = []
    for name in dict.fromkeys(passed):
        server = servers.servers.get(name)
        if server is None or server.tool_prefix:
            continue
        unnamed = evolve(server, name="")
        first = next((other for entry, other in seen if entry == unnamed), None)
        seen.append((unnamed, name))
        if first is not None:
            return (
                f"{servers.origin}: servers {first!r} and {name!r} are the same server, both "
                f"passed through (mcp.passthrough) without a toolPrefix: every tool of "
                f'{name!r} would clash with {first!r}\'s; give one of them a "toolPrefix" '
                "or pass only one through"
            )
    return None
