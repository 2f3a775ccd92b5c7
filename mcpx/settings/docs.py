# -*- test-case-name: tests.settings.test_docs -*-
"""
C{docs/configuration.md}, generated from the declarations.

Run C{python -m mcpx.settings.docs > docs/configuration.md} after changing a
setting; a test fails while the committed file differs from what this prints.
"""

from __future__ import annotations

import sys

from mcpx.settings.declarations import SETTINGS, Setting
from mcpx.settings.durations import ACCEPTED_FORMS
from mcpx.settings.kinds import Kind
from mcpx.settings.render import shown_value
from mcpx.settings.servers import AUTH_FIELDS, AuthType
from mcpx.spec.revision import NEWEST_FIRST

REGENERATE = "python -m mcpx.settings.docs > docs/configuration.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _kind(setting: Setting) -> str:
    if setting.kind is Kind.INTEGER and setting.minimum is not None:
        return f"integer (at least {setting.minimum})"
    if setting.kind is Kind.CHOICE:
        return "one of " + ", ".join(f"`{choice}`" for choice in setting.choices)
    if setting.kind is Kind.AUTH:
        return ", ".join(f"`{choice}`" for choice in setting.choices) + ' or an `"oauth"` object'
    if setting.kind is Kind.REVISION:
        return "revision, or unset"
    return str(setting.kind.value)


def _default(setting: Setting) -> str:
    text = shown_value(setting, setting.default)
    if text.startswith("("):
        return text.strip("()")
    spelled = f"`{text}`"
    mebibyte = 1024 * 1024
    size = setting.default
    if setting.name.endswith("Size") and isinstance(size, int) and size % mebibyte == 0:
        spelled += f" ({size // mebibyte} MiB)"
    return spelled


def _settings_table() -> list[str]:
    lines = [
        "| Setting | Kind | Default | Environment | Flag | What it does |",
        "|---|---|---|---|---|---|",
    ]
    for setting in SETTINGS:
        cells = [
            f"`{setting.name}`",
            _kind(setting),
            _default(setting),
            f"`{setting.env}`",
            f"`{setting.flag}`",
            # Only the prose column: in a code span the entity would show as written.
            setting.help.replace("<", "&lt;"),
        ]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return lines


_AUTH_EXAMPLES = {
    AuthType.BEARER: '{"type": "bearer", "token": "${GITHUB_TOKEN}"}',
    AuthType.BASIC: '{"type": "basic", "username": "me", "password": "${REGISTRY_PASSWORD}"}',
    AuthType.HEADER: '{"type": "header", "name": "X-Api-Key", "value": "${SEARCH_KEY}"}',
    AuthType.QUERY: '{"type": "query", "name": "api_key", "value": "${MAPS_KEY}"}',
    AuthType.ENV: '{"type": "env", "name": "DATABASE_PASSWORD", "value": "${DB_PASSWORD}"}',
    AuthType.OAUTH: '{"type": "oauth"}',
}

_AUTH_MEANING = {
    AuthType.BEARER: "sent as `Authorization: Bearer <token>` on every request",
    AuthType.BASIC: "sent as HTTP basic authentication (`Authorization: Basic ...`)",
    AuthType.HEADER: "sent in the named header on every request",
    AuthType.QUERY: "added to the URL as the named query parameter",
    AuthType.ENV: "stdio servers only: put in the child process's environment as the "
    "named variable",
    AuthType.OAUTH: "remote servers only: mcpx signs in with OAuth (`mcpx auth login NAME`); "
    "every field is optional, see [auth](auth.md)",
}


def _auth_rows() -> list[str]:
    lines = ["| Type | Fields | What mcpx does with it | Example |", "|---|---|---|---|"]
    for auth_type in AuthType:
        fields = ", ".join(f"`{name}`" for name in AUTH_FIELDS[auth_type])
        cells = [
            f"`{auth_type.value}`",
            fields,
            _AUTH_MEANING[auth_type],
            f"`{_AUTH_EXAMPLES[auth_type]}`",
        ]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return lines


def render_configuration_md() -> str:
    """The whole of C{docs/configuration.md}."""
    newest_first = ", ".join(rev.value for rev in NEWEST_FIRST)
    lines = [
        "# Configuration",
        "",
        "<!-- Generated from mcpx/settings/declarations.py; do not edit by hand.",
        f"     Regenerate with: {REGENERATE} -->",
        "",
        "mcpx reads its settings from four places. Each one overrides the ones before it:",
        "",
        "1. the built-in default;",
        "2. the config file;",
        "3. an environment variable (`MCPX_...`);",
        "4. a command-line flag (`mcpx daemon` and `mcpx settings` take one flag per setting; "
        "`mcpx serve` takes `--passthrough` alone, since the daemon it is served by holds the "
        "rest).",
        "",
        "mcpx keeps track of which layer each value came from. `mcpx settings` prints every "
        "setting with its value and that source (a file path, a variable name or a flag), and "
        "the revision precedence that results. Add `--json` to get the same information as "
        "JSON for a script. A name that is not a setting is an error wherever it appears, "
        "whether in the file or as an `MCPX_` variable. The error lists the valid names and "
        "suggests the closest one, so a misspelt setting does not quietly do nothing.",
        "",
        "## Settings",
        "",
        *_settings_table(),
        "",
        "## Writing values",
        "",
        f"- **Durations** are {ACCEPTED_FORMS}. Several parts add up, as in `1m30s`, and a "
        "part may have a decimal fraction (`1.5s`). A number without a unit is refused, even "
        "in the JSON file. MCP counts some times in milliseconds and most tools count "
        'seconds, so a bare `30` could mean either. Write `"30s"`.',
        "- **Lists** (string, revision and endpoint lists) are comma-separated in a variable "
        'or a flag (`--passthrough demo,tasks`). In the file, use a JSON array (`["demo", '
        '"tasks"]`) or the same comma-separated string. An empty value means an empty list.',
        "- **Booleans** are `true` or `false`. A variable or flag also accepts `1`/`0`, "
        "`yes`/`no` and `on`/`off`.",
        f"- **Revisions** are the dates of the MCP revisions mcpx speaks: {newest_first}. "
        "An unknown revision is refused, and the error lists these.",
        "- **Endpoints** are Twisted endpoint strings, such as `tcp:8899:interface=127.0.0.1` "
        "or `unix:/run/mcpx/api.sock`. Listening on anything other than loopback lets "
        "whoever can reach that address run tools as you.",
        "",
        "## Revision precedence",
        "",
        "When two revisions require incompatible behaviour and the revision the peer stated "
        "does not decide between them, the first revision in `spec.precedence` wins. If the "
        "list leaves some revisions out, mcpx appends them after it, newest first. "
        "`spec.first` (`--mcp-spec`, `MCPX_MCP_SPEC`) then moves one revision to the front. "
        "For example, `MCPX_MCP_SPEC=2025-06-18` gives the order 2025-06-18, 2026-07-28, "
        "2025-11-25, 2025-03-26, 2024-11-05. mcpx applies every revision's rules strictly, "
        "except for the revisions listed in `spec.lenient`.",
        "",
        "## The config file",
        "",
        "### Where it is",
        "",
        "mcpx uses the path in `$MCPX_CONFIG` if that variable is set. Otherwise it reads "
        "`$XDG_CONFIG_HOME/mcpx/config.json`, and when `XDG_CONFIG_HOME` is unset that is "
        "`~/.config/mcpx/config.json`.",
        "",
        "If there is no file at the default location, mcpx uses the configuration it ships "
        "with, and sources show it as `default config`. That configuration has one server, "
        "`demo`, which runs `python -m mcpx.demo` with the interpreter mcpx itself runs on. "
        '(In the shipped file only, a `"command"` of exactly `"python"` stands for that '
        "interpreter.) If `$MCPX_CONFIG` names a file that does not exist, mcpx reports an "
        "error and does not fall back.",
        "",
        "State lives in `$MCPX_STATE_DIR`, or otherwise in `$XDG_STATE_HOME/mcpx` (by default "
        "`~/.local/state/mcpx`). That includes the daemon's unix socket, `mcpx.sock`.",
        "",
        "A command reads the file when it starts. The daemon reads it when it starts and again "
        "on each reload (`mcpx reload`, `SIGHUP` or `POST /v1/reload`), without a restart: "
        "servers are applied at once (added ones become available, removed and changed ones "
        "are stopped, the others keep running), and so are `pool.callTimeout`, "
        "`pool.callMaxDuration`, `pool.idleTimeout` and `pool.stableAfter`. Only the other "
        "settings the file changed wait for the next start (`mcpx stop`, then start the "
        "daemon again); `mcpx reload` names them. A reload that finds the file missing or "
        "invalid is refused and changes nothing (see docs/api.md).",
        "",
        "### Settings in the file",
        "",
        "The file is a JSON object. Give a setting either nested inside its section or by its "
        "full dotted name at the top level. These two files say the same thing:",
        "",
        "```json",
        '{"pool": {"callTimeout": "30s"}, "daemon": {"logLevel": "debug"}}',
        "```",
        "",
        "```json",
        '{"pool.callTimeout": "30s", "daemon.logLevel": "debug"}',
        "```",
        "",
        "Giving the same setting both ways is an error. mcpx also refuses any key that is not "
        "a section, a setting, `servers`, `mcpServers`, `serverDefaults` (the policy keys every "
        "server starts from, see [policy.md](policy.md)) or `$schema`, and it refuses a key that "
        "appears twice in one object.",
        "",
        "### Servers",
        "",
        "`servers` maps each server's name to how mcpx reaches it. mcpx also accepts "
        "`mcpServers`, the key MCP hosts use in their own files, so you can copy entries "
        "across without changing them. The two are merged, and a name that appears under both "
        "is an error. A name is made of letters, digits, `.`, `_` and `-`.",
        "",
        "A host's own file can be pointed at as it is (`MCPX_CONFIG=~/.config/Claude/"
        "claude_desktop_config.json`). A file with `mcpServers` or `inputs` is taken for one, "
        "and there the keys that are the host's (Claude Desktop's `globalShortcut`, VS Code's "
        "`inputs`) are ignored, each noted in the daemon's log, instead of refused. The hosts' "
        "variables are not environment variables, and mcpx never looks them up as such: "
        "`${env:NAME}` (Cursor, VS Code) is read as `${NAME}`, while `${workspaceFolder}`, "
        "`${userHome}` or `${input:ID}` in an entry is refused by name. `mcpx import FILE` "
        "([cli.md](cli.md)) copies such a file's servers into mcpx's, filling those in.",
        "",
        "An entry has exactly one of `command` or `url`:",
        "",
        "- **stdio server** (`command`): mcpx starts the program and speaks MCP over its "
        "standard input and output. `args` is a list of strings, `env` is an object of "
        "environment variables for the child, `envPassthrough` is a list of the names of "
        "the daemon's own variables to pass on to it (for example "
        '`"envPassthrough": ["AWS_PROFILE", "HTTPS_PROXY", "SSL_CERT_FILE"]`), and `cwd` is '
        "the directory to start it in "
        "(`~` is expanded; without it, your home directory, never the daemon's own). Each "
        "server runs in a process group of its own: stopping or restarting it signals "
        "everything it started (SIGTERM, then SIGKILL after a grace period); on Linux it "
        "dies with the daemon, and processes it forked that a killed daemon left behind "
        "are ended when the next daemon starts (they are recorded under `upstreams/` in the "
        "state directory and carry `MCPX_DAEMON_RUN` in their environment). The child "
        "does not inherit the daemon's environment: of the daemon's variables it gets "
        "`HOME`, `LOGNAME`, `PATH`, `SHELL`, `TERM`, `USER` (the MCP SDKs' list), the locale "
        "(`LANG`, `LANGUAGE`, `LC_*`), `TMPDIR`, `XDG_RUNTIME_DIR` and those its "
        "`envPassthrough` names, with its `env` over them; never another server's secrets "
        "or mcpx's own `MCPX_*` variables, which `envPassthrough` cannot name (see "
        "[security](security.md#upstream-processes)). A variable a server needs that is "
        "none of these (a proxy, a certificate bundle, a cloud profile) is given in its "
        "`env`, as `${NAME}` to take the daemon's, or named in `envPassthrough`; an "
        '`envPassthrough` in the top-level `"serverDefaults"` object is that of every stdio '
        "server whose entry gives none.",
        "- **remote server** (`url`): mcpx reaches the server over HTTP(S) at that URL. "
        "`headers` is an object of headers to send with every request.",
        "",
        "How mcpx treats a remote server that misbehaves: a redirect (307 or 308) to the same "
        "scheme, host and port is followed with the same request, and the new URL is used "
        "from then on; a redirect anywhere else is not followed (the headers and credentials "
        "would go with it), and the error names where it pointed, so that you can configure "
        "that URL if you trust it. A server that forgets its session (HTTP 404, or a 400 "
        "saying the session is unknown) is initialized again; the request is sent again "
        "only if the server cannot have started it, or it only reads (a listing, a read, a "
        "ping, a tool annotated `idempotentHint`), so a call is never run twice behind your "
        "back: when its outcome is unknown, the error says so. A 429 or 503 with "
        "`Retry-After` is honoured up to a minute, both for a call's error (`retry_in`) and "
        "for the next start. Answers are bounded by `transport.maxMessageSize` as on stdio; "
        "up to `transport.httpConnections` idle connections per server are kept for reuse.",
        "",
        "An `https://` server's certificate is checked against the system's certificate "
        "authorities and the URL's host. A remote entry's `tls` object changes that for that "
        "server: `ca` is a PEM file of the authorities to trust instead (a private CA), "
        "`serverName` is the name the certificate must carry when it is not the URL's host "
        "(it is also sent as SNI), and `cert` (with `key`, when the private key is in a file "
        "of its own) is the client certificate mcpx shows a server that asks for one (mutual "
        'TLS). For example `"tls": {"ca": "/etc/mcpx/internal-ca.pem", "serverName": '
        '"mcp.internal"}`. A certificate that fails the check is reported saying which '
        "setting would trust it.",
        "",
        "A `type` field copied from a host's file (`stdio`, `http`, `streamable-http`, `sse`) "
        "is accepted when it agrees with `command`/`url`. mcpx chooses the transport itself.",
        "",
        "Either kind of entry may give `toolPrefix`, put before each of the server's tool "
        "names when it is passed through (`mcp.passthrough`): with "
        '`"toolPrefix": "work_"`, its `add_note` is offered to hosts as `work_add_note`, and '
        "a call of `work_add_note` reaches the server's `add_note`. It is 1 to 64 letters, "
        "digits, `_`, `-` or `.`, so the names stay valid tool names. This is how two "
        "pass-through servers that offer a tool of the same name are both reached: without "
        "a prefix, the name stays with the server passed through first, the other server's "
        "tool of that name is left out, and a warning (in the log and as a `warning` event) "
        "names both servers. Two entries that are the same server under two names, both "
        "passed through and neither with a prefix, are refused when the daemon starts and on "
        "reload, naming both. Changing a server's prefix restarts it on reload. The gateway's "
        "own tools (`mcpx_call`) and the CLI keep using the server's own tool names.",
        "",
        "Either kind of entry may give `protocol`, to pin the era or revision mcpx speaks to "
        'the server in instead of finding it out: `"legacy"` (an `initialize` handshake '
        'offering the newest legacy revision), a legacy revision such as `"2025-03-26"` '
        '(offered as it is), or `"modern"` / `"2026-07-28"`. Without it mcpx sends '
        "`server/discover` first and remembers what it found (a server that exits on that "
        "probe, as the Python SDK up to 1.8 does, is started again and spoken to in the "
        "legacy era). A server found modern that also takes `initialize` (a dual-era "
        "server) meets each host in the host's own era: a handshake-era host's calls go to "
        "a second, legacy-era instance of it, started by the first such call, so the server "
        "can ask that host on the connection as it would directly (spec/era-mirroring.md); "
        "a pinned server is met in its pinned era by every host. Changing it restarts the "
        "server on reload.",
        "",
        "```json",
        "{",
        '  "servers": {',
        '    "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", '
        '"/srv/docs"]},',
        '    "github": {',
        '      "url": "https://mcp.example.com/github",',
        '      "auth": {"type": "bearer", "token": "${GITHUB_TOKEN}"}',
        "    },",
        '    "scratch": {"command": "scratch-mcp", "scope": "client"}',
        "  }",
        "}",
        "```",
        "",
        "mcpx reports every mistake in a server entry with the file, the server and the field, "
        "and says what it expected.",
        "",
        "### Credentials: `auth`",
        "",
        "A server may have an `auth` object. Its `type` decides the other fields:",
        "",
        *_auth_rows(),
        "",
        "The `env` type applies only to stdio servers, and the other types only to remote "
        'servers. For `oauth` (signing in, `"grant": "client_credentials"` with a '
        "`clientSecret` or a `privateKeyFile`) see [auth](auth.md). Under `daemon.auth` "
        '`oauth` each caller signs in to an `oauth` server for itself; `"shared": true` '
        "lets every caller use the owner's sign-in instead "
        "([auth](auth.md#upstream-sign-ins-per-person)).",
        "",
        "mcpx never shows credentials, header values or `env` values: wherever a server is "
        "printed, in logs, in `mcpx settings` or in its JSON, they appear as `***`. "
        "In a URL, the user information and query values are hidden too. "
        "Put secrets in `auth`, `headers` or `env`, not in `args`, which are shown "
        "as written.",
        "",
        "A URL may carry a user name and password (`https://me:${PASSWORD}@host/mcp`): mcpx "
        "sends them as `basic` auth and leaves them out of the URL it uses and shows. Such a "
        "URL together with an `auth` block is an error; keep one of the two.",
        "",
        "An upstream may also send a credential back, for instance by quoting the "
        "`Authorization` header it refused. So the daemon masks every credential it knows "
        "as `***` in error answers (on `/v1` and `/mcp`), in a server's `last_error`, in "
        "events and in its log: every `auth` value, the URL's user name and password, and "
        "the values of `headers`, `env` entries and query parameters whose name looks like "
        "a credential (it contains TOKEN, SECRET, KEY, PASSWORD, AUTH, COOKIE, SESSION, "
        "...). A value is also masked URL-encoded and JSON-escaped, and for basic auth "
        "as the base64 of `user:password`. Values shorter than 4 characters are not "
        "masked, since that would garble every message and such a value protects little. "
        "A tool's successful result is passed on as the server gave it: what a tool "
        "returns is its answer, and scanning every result would cost every call. Under "
        "`twistd` the log is masked alike: the daemon writes it through the same observer "
        "(see [running.md](running.md)).",
        "",
        "### Environment references: `${NAME}`",
        "",
        "Any string value in a server entry can refer to an environment variable as `${NAME}`. "
        "This lets the file name a secret without containing it. mcpx fills the references "
        "in when it reads the file, using the environment it was started with. A variable that "
        "is not set takes down the server naming it, and no other: that server is "
        "`misconfigured` (`mcpx servers` and the status page say which variable is missing, "
        "the daemon's start and every reload warn of it) and is never started, while the "
        "others run. To write a literal `${`, use `$${`.",
        "",
        "### Scope",
        "",
        '`scope` decides who shares a running instance of a server. With `"shared"` (the '
        'default), one instance serves every client. With `"client"`, each client gets an '
        "instance of its own. Use `client` for a server that keeps state about whoever is "
        "calling it.",
        "",
        "### Warm start",
        "",
        "A server starts on its first call and is stopped once unused for `pool.idleTimeout`. "
        'Give it `"warm": 1` to start it with the daemon instead and keep it running: it is '
        "never stopped for being idle, and when it crashes it is started again after the "
        "pool's usual back-off (the delay doubles with each crash in a row). `0`, the "
        "default, keeps the start on first use. Only a shared server can be warm: a "
        '`"client"`-scoped instance belongs to a caller, and none has called yet. A reload '
        "that turns `warm` on starts the server; one that turns it off leaves the running "
        "instance to be stopped once idle, like any other.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render_configuration_md())
