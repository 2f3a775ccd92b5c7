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
"""

from __future__ import annotations

import base64
import enum
import re
from collections.abc import Iterator, Mapping
from typing import NoReturn, TypeAlias
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

from attrs import field, frozen

from mcpx.policy.settings import DEFAULT_POLICY, POLICY_FIELDS, ServerPolicy
from mcpx.settings.errors import SettingsError, closest

#: What every redacted value is shown as.
REDACTED = "***"

_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_REFERENCE = re.compile(r"\$(\$?)\{([^}]*)\}?")


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


#: The fields each auth type takes besides C{type}, in the order they are shown.
AUTH_FIELDS: Mapping[AuthType, tuple[str, ...]] = {
    AuthType.BEARER: ("token",),
    AuthType.BASIC: ("username", "password"),
    AuthType.HEADER: ("name", "value"),
    AuthType.QUERY: ("name", "value"),
    AuthType.ENV: ("name", "value"),
    AuthType.OAUTH: ("clientId", "clientSecret", "clientMetadataUrl", "scopes"),
}

#: Auth types that make sense for a server reached over HTTP, and for a child process.
_REMOTE_AUTH = frozenset(
    {AuthType.BEARER, AuthType.BASIC, AuthType.HEADER, AuthType.QUERY, AuthType.OAUTH}
)
_STDIO_AUTH = frozenset({AuthType.ENV})


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


@frozen
class OAuthSettings:
    """
    What an C{oauth} auth block configures; with nothing set mcpx discovers the
    authorization server and registers itself.

    @ivar client_id: a client registered beforehand, used before any other.
    @ivar metadata_url: a client ID metadata document URL, used as the client id where
        the authorization server supports them.
    @ivar scopes: the scopes to ask for instead of those the server suggests.
    """

    client_id: str | None = None
    metadata_url: str | None = None
    scopes: tuple[str, ...] = ()

    def shown(self, has_secret: bool) -> dict[str, object]:
        shown: dict[str, object] = {"type": AuthType.OAUTH.value}
        if self.client_id is not None:
            shown["clientId"] = self.client_id
        if has_secret:
            shown["clientSecret"] = REDACTED
        if self.metadata_url is not None:
            shown["clientMetadataUrl"] = self.metadata_url
        if self.scopes:
            shown["scopes"] = list(self.scopes)
        return shown


def _reveal_all(values: Mapping[str, Secret]) -> dict[str, str]:
    return {key: value.reveal() for key, value in values.items()}


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


@frozen(repr=False)
class StdioServer:
    """
    A server mcpx starts as a child process and speaks to over stdin and stdout.

    @ivar env: variables added to the child's environment.
    @ivar cwd: the directory it starts in, or C{None} for the user's home directory.
    """

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, Secret] = field(factory=dict)
    cwd: str | None = None
    auth: Auth | None = None
    scope: Scope = Scope.SHARED

    def child_env(self) -> dict[str, str]:
        """The variables to add to the child's environment, credentials included."""
        added = _reveal_all(self.env)
        if self.auth is not None:
            added.update(self.auth.child_env())
        return added

    def redacted(self) -> dict[str, object]:
        """This server as config-file JSON, with every secret shown as C{***}."""
        shown: dict[str, object] = {
            "command": self.command,
            "args": list(self.args),
            "env": _redact_all(self.env),
        }
        if self.cwd is not None:
            shown["cwd"] = self.cwd
        if self.auth is not None:
            shown["auth"] = self.auth.redacted()
        shown["scope"] = self.scope.value
        return shown

    def __repr__(self) -> str:
        return f"StdioServer({self.name!r}, {self.redacted()!r})"


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
    """A server mcpx reaches over HTTP at C{url}."""

    name: str
    url: str
    headers: Mapping[str, Secret] = field(factory=dict)
    auth: Auth | None = None
    scope: Scope = Scope.SHARED
    tls: Tls | None = None

    def request_headers(self) -> dict[str, str]:
        """The headers to send on every request, credentials included."""
        sent = _reveal_all(self.headers)
        if self.auth is not None:
            sent.update(self.auth.http_headers())
        return sent

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
        if self.auth is not None:
            shown["auth"] = self.auth.redacted()
        shown["scope"] = self.scope.value
        if self.tls is not None:
            shown["tls"] = self.tls.shown()
        return shown

    def __repr__(self) -> str:
        return f"RemoteServer({self.name!r}, {self.redacted()!r})"


Server: TypeAlias = StdioServer | RemoteServer


@frozen(repr=False)
class ServersConfig:
    """
    The configured servers, in the order the file gives them.

    @ivar origin: where they came from: the config file's path, or
        C{"default config"} for the configuration shipped with mcpx.
    @ivar path: the config file's path, or C{None} when there was no file.
    @ivar policies: each server's policy (L{mcpx.policy.settings}), kept apart from the
        server so that changing it does not restart the server.
    """

    servers: Mapping[str, Server]
    origin: str
    path: str | None = None
    policies: Mapping[str, ServerPolicy] = field(factory=dict)

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


STDIO_FIELDS = ("command", "args", "env", "cwd", "auth", "scope", "type", *POLICY_FIELDS)
REMOTE_FIELDS = ("url", "headers", "auth", "scope", "type", "tls", *POLICY_FIELDS)
TLS_FIELDS = ("ca", "cert", "key", "serverName")

#: C{type} is accepted so that entries copied from a host's own config file work
#: unchanged; mcpx decides the transport from C{command}/C{url} and only checks
#: that the two agree.
_STDIO_TYPES = frozenset({"stdio"})
_REMOTE_TYPES = frozenset({"http", "streamable-http", "streamableHttp", "sse"})


def parse_server(
    name: str,
    entry: object,
    *,
    origin: str,
    environ: Mapping[str, str],
    interpreter: str | None = None,
) -> Server:
    """
    Read one server entry of the config file.

    @param origin: the file it came from, named in every error.
    @param environ: what C{${NAME}} references are filled in from.
    @param interpreter: when given, a C{command} of exactly C{"python"} becomes
        this path.  Only the configuration shipped with mcpx passes it, because
        only there is the interpreter unknown when the file is written.
    @raise SettingsError: naming the file, the server and the field.
    """
    return _ServerReader(origin, name, environ).read(entry, interpreter)


class _ServerReader:
    """Reads one server entry, with errors that say where."""

    def __init__(self, origin: str, name: str, environ: Mapping[str, str]) -> None:
        self.origin = origin
        self.name = name
        self.environ = environ

    def fail(self, field: str | None, problem: str) -> NoReturn:
        where = f"{self.origin}: server {self.name!r}"
        if field is not None:
            where += f": field {field!r}"
        raise SettingsError(f"{where}: {problem}")

    def read(self, entry: object, interpreter: str | None) -> Server:
        if _SERVER_NAME.fullmatch(self.name) is None:
            self.fail(
                None,
                "invalid server name; use letters, digits, '.', '_' and '-', "
                "starting with a letter or digit",
            )
        if not isinstance(entry, dict):
            self.fail(None, "a server must be a JSON object with a command or a url")
        has_command, has_url = "command" in entry, "url" in entry
        if has_command and has_url:
            self.fail("url", 'give "command" (a stdio server) or "url" (a remote server), not both')
        if not (has_command or has_url):
            self.fail(
                "command", 'missing; give "command" (a stdio server) or "url" (a remote server)'
            )
        if has_command:
            return self.stdio(entry, interpreter)
        return self.remote(entry)

    def check_fields(self, entry: Mapping[str, object], valid: tuple[str, ...], kind: str) -> None:
        for key in entry:
            if key not in valid:
                guess = closest(key, valid)
                hint = f"did you mean {guess!r}? " if guess is not None else ""
                self.fail(key, f"unknown field; {hint}valid fields for {kind}: {', '.join(valid)}")

    def check_type(self, entry: Mapping[str, object], allowed: frozenset[str], kind: str) -> None:
        if "type" not in entry:
            return
        given = entry["type"]
        if given not in allowed:
            self.fail("type", f"{given!r} does not describe {kind}; use {', '.join(allowed)}")

    def stdio(self, entry: Mapping[str, object], interpreter: str | None) -> StdioServer:
        self.check_fields(entry, STDIO_FIELDS, "a stdio server")
        self.check_type(entry, _STDIO_TYPES, "a stdio server")
        command = self.string(entry, "command")
        if not command:
            self.fail("command", "must not be empty")
        if interpreter is not None and entry["command"] == "python":
            command = interpreter
        cwd = self.string(entry, "cwd") if "cwd" in entry else None
        return StdioServer(
            name=self.name,
            command=command,
            args=self.strings(entry, "args"),
            env=self.secrets(entry, "env", _ENV_NAME, "an environment variable name"),
            cwd=cwd,
            auth=self.auth(entry, _STDIO_AUTH, "a stdio server"),
            scope=self.scope(entry),
        )

    def remote(self, entry: Mapping[str, object]) -> RemoteServer:
        self.check_fields(entry, REMOTE_FIELDS, "a remote server")
        self.check_type(entry, _REMOTE_TYPES, "a remote server")
        url = self.string(entry, "url")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            self.fail("url", "must be an http:// or https:// URL with a host")
        auth = self.auth(entry, _REMOTE_AUTH, "a remote server")
        if "@" in parts.netloc:
            url, auth = self.userinfo(url, auth)
        return RemoteServer(
            name=self.name,
            url=url,
            headers=self.secrets(entry, "headers", _HEADER_NAME, "an HTTP header name"),
            auth=auth,
            scope=self.scope(entry),
            tls=self.tls(entry, parts.scheme),
        )

    def tls(self, entry: Mapping[str, object], scheme: str) -> Tls | None:
        if "tls" not in entry:
            return None
        block = entry["tls"]
        if not isinstance(block, dict):
            self.fail("tls", f"must be an object with any of {', '.join(TLS_FIELDS)}")
        if scheme != "https":
            self.fail("tls", "applies only to an https:// URL")
        for key in block:
            if key not in TLS_FIELDS:
                guess = closest(key, TLS_FIELDS)
                hint = f"did you mean {guess!r}? " if guess is not None else ""
                self.fail(f"tls.{key}", f"unknown field; {hint}tls takes: {', '.join(TLS_FIELDS)}")
        values = {key: self.string(block, key, f"tls.{key}") for key in block}
        if "key" in values and "cert" not in values:
            self.fail("tls.key", 'a key needs its certificate; give "cert" too')
        return Tls(
            ca=values.get("ca"),
            cert=values.get("cert"),
            key=values.get("key"),
            server_name=values.get("serverName"),
        )

    def userinfo(self, url: str, auth: Auth | None) -> tuple[str, Auth]:
        """
        A URL's C{user:password@} as basic auth, and the URL without it.

        HTTP clients do not send user information themselves, and a URL that keeps
        it would show the password wherever the URL is shown.
        """
        if auth is not None:
            self.fail(
                "url",
                "the URL carries a user name and password and the entry has an auth block "
                "too; remove the 'user:password@' from the URL, or the auth block",
            )
        parts = urlsplit(url)
        credentials, host = parts.netloc.rsplit("@", 1)
        username, _, password = credentials.partition(":")
        stripped = urlunsplit(parts._replace(netloc=host))
        return stripped, Auth(
            AuthType.BASIC, Secret(unquote(password)), username=Secret(unquote(username))
        )

    def expand(self, field: str, text: str) -> str:
        """Fill in C{${NAME}} references from the environment."""

        def substitute(reference: re.Match[str]) -> str:
            escaped, variable = reference.group(1), reference.group(2)
            whole = reference.group(0)
            if escaped:
                return whole[1:]
            if not whole.endswith("}") or _ENV_NAME.fullmatch(variable) is None:
                self.fail(
                    field,
                    "a '${' must start a reference such as ${NAME} "
                    "(write '$${' for a literal '${')",
                )
            value = self.environ.get(variable)
            if value is None:
                self.fail(
                    field,
                    f"environment variable {variable} is not set; set it, or write "
                    "the value in the file",
                )
            return value

        return _REFERENCE.sub(substitute, text)

    def string(self, entry: Mapping[str, object], key: str, field: str | None = None) -> str:
        shown = field or key
        value = entry[key]
        if not isinstance(value, str):
            self.fail(shown, "must be a string")
        return self.expand(shown, value)

    def strings(self, entry: Mapping[str, object], key: str) -> tuple[str, ...]:
        value = entry.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.fail(key, "must be an array of strings")
        return tuple(self.expand(f"{key}[{i}]", item) for i, item in enumerate(value))

    def secrets(
        self, entry: Mapping[str, object], key: str, names: re.Pattern[str], what: str
    ) -> dict[str, Secret]:
        value = entry.get(key, {})
        if not isinstance(value, dict):
            self.fail(key, "must be an object mapping names to strings")
        found = {}
        for item, text in value.items():
            shown = f"{key}.{item}"
            if names.fullmatch(item) is None:
                self.fail(shown, f"{item!r} is not {what}")
            if not isinstance(text, str):
                self.fail(shown, "must be a string")
            found[item] = Secret(self.expand(shown, text))
        return found

    def scope(self, entry: Mapping[str, object]) -> Scope:
        value = entry.get("scope", Scope.SHARED.value)
        for scope in Scope:
            if value == scope.value:
                return scope
        self.fail("scope", f"{value!r} is not a scope; use shared or client")

    def auth(
        self, entry: Mapping[str, object], allowed: frozenset[AuthType], kind: str
    ) -> Auth | None:
        if "auth" not in entry:
            return None
        block = entry["auth"]
        if not isinstance(block, dict):
            self.fail("auth", 'must be an object with a "type"')
        given = block.get("type")
        valid = ", ".join(t.value for t in AuthType)
        try:
            auth_type = AuthType(given)
        except ValueError:
            self.fail("auth.type", f"unknown auth type {given!r}; valid types: {valid}")
        if auth_type not in allowed:
            usable = ", ".join(t.value for t in AuthType if t in allowed)
            self.fail("auth.type", f"{auth_type.value!r} does not apply to {kind}; use {usable}")
        expected = ("type", *AUTH_FIELDS[auth_type])
        for key in block:
            if key not in expected:
                self.fail(
                    f"auth.{key}",
                    f"unknown field; {auth_type.value} auth takes: {', '.join(expected)}",
                )
        if auth_type is AuthType.OAUTH:
            return self.oauth(block)
        values = {}
        for key in AUTH_FIELDS[auth_type]:
            if key not in block:
                self.fail(f"auth.{key}", f"missing; {auth_type.value} auth needs it")
            values[key] = self.string(block, key, f"auth.{key}")
        if auth_type is AuthType.BEARER:
            return Auth(auth_type, Secret(values["token"]))
        if auth_type is AuthType.BASIC:
            return Auth(auth_type, Secret(values["password"]), username=Secret(values["username"]))
        pattern, what = (
            (_ENV_NAME, "an environment variable name")
            if auth_type is AuthType.ENV
            else (_HEADER_NAME, "a valid name")
        )
        if pattern.fullmatch(values["name"]) is None:
            self.fail("auth.name", f"{values['name']!r} is not {what}")
        return Auth(auth_type, Secret(values["value"]), name=values["name"])

    def oauth(self, block: Mapping[str, object]) -> Auth:
        def optional(key: str) -> str | None:
            if key not in block:
                return None
            value = self.string(block, key, f"auth.{key}")
            if not value:
                self.fail(f"auth.{key}", "must not be empty; leave it out instead")
            return value

        secret = optional("clientSecret")
        client_id = optional("clientId")
        if secret is not None and client_id is None:
            self.fail("auth.clientSecret", 'needs "clientId": a secret belongs to a client')
        metadata_url = optional("clientMetadataUrl")
        if metadata_url is not None and not metadata_url.startswith("https://"):
            self.fail("auth.clientMetadataUrl", "must be an https URL")
        scopes = self.strings(block, "scopes") if "scopes" in block else ()
        return Auth(
            AuthType.OAUTH,
            Secret(secret or ""),
            oauth=OAuthSettings(client_id, metadata_url, scopes),
        )
