# -*- test-case-name: tests.settings.test_servers -*-
"""
Reading one server entry of the config file into a L{StdioServer} or
L{RemoteServer}: its fields checked, C{${NAME}} references filled in from the
environment, its C{auth} and C{tls} blocks read, every error naming the file, the
server and the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NoReturn
from urllib.parse import unquote, urlsplit, urlunsplit

from attrs import evolve

from mcpx.settings.client_key import ClientKeyError, read_client_key
from mcpx.settings.declarations import ENV_PREFIX
from mcpx.settings.errors import SettingsError, refuse_unknown
from mcpx.settings.server_policy import POLICY_FIELDS
from mcpx.settings.servers import (
    AUTH_FIELDS,
    CLIENT_CREDENTIALS,
    Auth,
    AuthType,
    OAuthSettings,
    RemoteServer,
    Scope,
    Secret,
    Server,
    StdioServer,
    Tls,
)
from mcpx.spec.revision import Revision

#: What a server's name and an environment variable's name may be.
SERVER_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: A C{toolPrefix}: characters that keep a tool name valid (letters, digits, C{_ - .}),
#: short enough to leave room for the name it goes before (tool names end at 128).
_TOOL_PREFIX = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_REFERENCE = re.compile(r"\$(\$?)\{([^}]*)\}?")
#: The hosts' own variables, which look like environment variables but are not.
HOST_VARIABLES = frozenset(
    {
        "workspaceFolder",
        "workspaceFolderBasename",
        "workspaceRoot",
        "userHome",
        "pathSeparator",
        "/",
    }
)

#: Auth types that make sense for a server reached over HTTP, and for a child process.
_REMOTE_AUTH = frozenset(
    {AuthType.BEARER, AuthType.BASIC, AuthType.HEADER, AuthType.QUERY, AuthType.OAUTH}
)
_STDIO_AUTH = frozenset({AuthType.ENV})

#: The names of the daemon's variables a stdio server is given (its entry's, else
#: C{serverDefaults}').
ENV_PASSTHROUGH = "envPassthrough"

STDIO_FIELDS = (
    "command",
    "args",
    "env",
    ENV_PASSTHROUGH,
    "cwd",
    "auth",
    "scope",
    "warm",
    "type",
    "toolPrefix",
    "protocol",
    *POLICY_FIELDS,
)
#: What a C{protocol} may pin: an era, or one revision (the era follows from it).
PROTOCOL_PINS: tuple[str, ...] = ("legacy", "modern", *(revision.value for revision in Revision))

REMOTE_FIELDS = (
    "url",
    "headers",
    "auth",
    "scope",
    "warm",
    "type",
    "tls",
    "toolPrefix",
    "protocol",
    *POLICY_FIELDS,
)
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
    env_passthrough: tuple[str, ...] = (),
) -> Server:
    """
    Read one server entry of the config file.

    @param origin: the file it came from, named in every error.
    @param environ: what C{${NAME}} references are filled in from.
    @param env_passthrough: a stdio server's C{envPassthrough} when its entry gives
        none (C{serverDefaults}', L{env_passthrough_default}).
    @param interpreter: when given, a C{command} of exactly C{"python"} becomes
        this path.  Only the configuration shipped with mcpx passes it, because
        only there is the interpreter unknown when the file is written.
    @raise SettingsError: naming the file, the server and the field.
    """
    return _ServerReader(origin, name, environ, env_passthrough).read(entry, interpreter)


def env_passthrough_default(defaults: object, *, origin: str) -> tuple[str, ...]:
    """
    The C{envPassthrough} of the top-level C{serverDefaults} object, checked as an
    entry's is: every stdio server that gives none of its own takes it.

    @raise SettingsError: naming C{serverDefaults} and the field.
    """
    if not isinstance(defaults, dict) or ENV_PASSTHROUGH not in defaults:
        return ()
    reader = _ServerReader(origin, "", {})
    reader.where = f"{origin}: serverDefaults"
    return reader.env_passthrough(defaults)


class _ServerReader:
    """Reads one server entry, with errors that say where."""

    def __init__(
        self,
        origin: str,
        name: str,
        environ: Mapping[str, str],
        env_passthrough: tuple[str, ...] = (),
    ) -> None:
        self.origin = origin
        self.name = name
        self.environ = environ
        self.where = f"{origin}: server {name!r}"
        self.default_passthrough = env_passthrough
        #: The variables its C{${NAME}} references name that the environment lacks.
        self.unset: list[str] = []

    def fail(self, field: str | None, problem: str) -> NoReturn:
        where = self.where
        if field is not None:
            where += f": field {field!r}"
        raise SettingsError(f"{where}: {problem}")

    def read(self, entry: object, interpreter: str | None) -> Server:
        if SERVER_NAME_PATTERN.fullmatch(self.name) is None:
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
        server = self.stdio(entry, interpreter) if has_command else self.remote(entry)
        if self.unset:
            # One server's missing variable takes down that server alone: it is listed as
            # misconfigured, saying why, and the others run.
            named = ", ".join(dict.fromkeys(self.unset))
            server = evolve(
                server,
                misconfigured=(
                    f"environment variable {named} is not set in the daemon's environment; "
                    "set it where the daemon starts (the shell, or Environment= in its "
                    "systemd unit) and restart the daemon, or write the value in "
                    f"{self.origin}"
                ),
            )
        return server

    def check_fields(self, entry: Mapping[str, object], valid: tuple[str, ...], kind: str) -> None:
        refuse_unknown(self.where, entry, valid, f"valid fields for {kind}")

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
            env=self.secrets(entry, "env", ENV_NAME_PATTERN, "an environment variable name"),
            cwd=cwd,
            auth=self.auth(entry, _STDIO_AUTH, "a stdio server"),
            scope=self.scope(entry),
            warm=self.warm(entry),
            tool_prefix=self.tool_prefix(entry),
            env_passthrough=self.env_passthrough(entry),
            protocol=self.protocol(entry),
        )

    def env_passthrough(self, entry: Mapping[str, object]) -> tuple[str, ...]:
        """
        The names of C{envPassthrough}: variables of the daemon's environment, never
        mcpx's own (C{MCPX_*}: its settings, its state directory); without one, the
        default C{serverDefaults} gives.
        """
        if ENV_PASSTHROUGH not in entry:
            return self.default_passthrough
        value = entry[ENV_PASSTHROUGH]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.fail(ENV_PASSTHROUGH, "must be an array of environment variable names")
        for i, name in enumerate(value):
            if ENV_NAME_PATTERN.fullmatch(name) is None:
                self.fail(
                    f"{ENV_PASSTHROUGH}[{i}]", f"{name!r} is not an environment variable name"
                )
            if name.startswith(ENV_PREFIX):
                self.fail(
                    f"{ENV_PASSTHROUGH}[{i}]",
                    f"{name} is mcpx's own; its variables are never passed to a server "
                    '(give the value in "env" if the server needs it)',
                )
        return tuple(dict.fromkeys(value))

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
            warm=self.warm(entry),
            tool_prefix=self.tool_prefix(entry),
            protocol=self.protocol(entry),
        )

    def tool_prefix(self, entry: Mapping[str, object]) -> str:
        if "toolPrefix" not in entry:
            return ""
        prefix = entry["toolPrefix"]
        if not isinstance(prefix, str) or _TOOL_PREFIX.fullmatch(prefix) is None:
            self.fail(
                "toolPrefix",
                "must be 1 to 64 letters, digits, '_', '-' or '.', so that the tool names "
                "it goes before stay valid",
            )
        return prefix

    def protocol(self, entry: Mapping[str, object]) -> str:
        if "protocol" not in entry:
            return ""
        given = entry["protocol"]
        if given not in PROTOCOL_PINS:
            self.fail("protocol", f"must be one of {', '.join(map(repr, PROTOCOL_PINS))}")
        return str(given)

    def tls(self, entry: Mapping[str, object], scheme: str) -> Tls | None:
        if "tls" not in entry:
            return None
        block = entry["tls"]
        if not isinstance(block, dict):
            self.fail("tls", f"must be an object with any of {', '.join(TLS_FIELDS)}")
        if scheme != "https":
            self.fail("tls", "applies only to an https:// URL")
        refuse_unknown(self.where, block, TLS_FIELDS, "tls takes", prefix="tls.")
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
            if whole.endswith("}"):
                variable = self.host_variable(field, variable)
            if not whole.endswith("}") or ENV_NAME_PATTERN.fullmatch(variable) is None:
                self.fail(
                    field,
                    "a '${' must start a reference such as ${NAME} "
                    "(write '$${' for a literal '${')",
                )
            value = self.environ.get(variable)
            if value is None:
                # Left as written: the server is misconfigured and never started with it.
                self.unset.append(variable)
                return whole
            return value

        return _REFERENCE.sub(substitute, text)

    def host_variable(self, field: str, variable: str) -> str:
        """
        The environment variable a reference in a host's style names: C{env:NAME} is
        C{NAME}.  The hosts' own variables (C{workspaceFolder}, C{input:ID}, ...) are
        refused, saying what they are: none is an environment variable.
        """
        scheme, colon, rest = variable.partition(":")
        if colon and scheme == "env" and ENV_NAME_PATTERN.fullmatch(rest):
            return rest
        if variable in HOST_VARIABLES or (colon and ENV_NAME_PATTERN.fullmatch(scheme)):
            self.fail(
                field,
                f"${{{variable}}} is a variable of an MCP host (Cursor, VS Code, Claude Code), "
                "not an environment variable, and mcpx cannot fill it in; write the value "
                "instead, or run `mcpx import FILE`, which rewrites a host's file for mcpx",
            )
        return variable

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

    def warm(self, entry: Mapping[str, object]) -> bool:
        value = entry.get("warm", 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.fail("warm", f"{value!r} is not a count; use 0 (start on first use) or 1")
        if value and entry.get("scope") == Scope.CLIENT.value:
            # A client's instance is started by that client's first call; before it
            # calls, nobody is there to start one for.
            self.fail("warm", 'a "client"-scoped server cannot be warm; use 0 or scope "shared"')
        return value > 0

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
            (ENV_NAME_PATTERN, "an environment variable name")
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
        grant = optional("grant") or "authorization_code"
        if grant not in ("authorization_code", CLIENT_CREDENTIALS):
            self.fail("auth.grant", f"{grant!r} is not authorization_code or {CLIENT_CREDENTIALS}")
        key_file = optional("privateKeyFile")
        algorithm = optional("signingAlgorithm")
        private_key = None
        if algorithm is not None and key_file is None:
            self.fail("auth.signingAlgorithm", 'applies only with "privateKeyFile"')
        if key_file is not None:
            if grant != CLIENT_CREDENTIALS:
                self.fail(
                    "auth.privateKeyFile",
                    f'applies only to "grant": "{CLIENT_CREDENTIALS}"',
                )
            if client_id is None:
                self.fail("auth.privateKeyFile", 'needs "clientId": a key belongs to a client')
            if secret is not None:
                self.fail(
                    "auth.privateKeyFile",
                    'give "clientSecret" or "privateKeyFile", not both',
                )
            try:
                private_key = read_client_key(key_file, algorithm)
            except ClientKeyError as error:
                self.fail("auth.privateKeyFile", f"{key_file}: {error}")
        if grant == CLIENT_CREDENTIALS and secret is None and private_key is None:
            self.fail(
                "auth.grant",
                f'{CLIENT_CREDENTIALS} needs "clientId" and "clientSecret" or '
                '"privateKeyFile": nobody signs in',
            )
        shared = block.get("shared", False)
        if not isinstance(shared, bool):
            self.fail("auth.shared", f"{shared!r} is not true or false")
        if shared and grant == CLIENT_CREDENTIALS:
            self.fail(
                "auth.shared",
                f'applies only to "grant": "authorization_code": a {CLIENT_CREDENTIALS} '
                "client serves every caller already",
            )
        return Auth(
            AuthType.OAUTH,
            Secret(secret or ""),
            oauth=OAuthSettings(client_id, metadata_url, scopes, grant, private_key, shared),
        )
