# -*- test-case-name: tests.settings.test_declarations -*-
"""
Every mcpx setting, declared once.

The environment variable, the command-line flag, the parser, the documentation in
C{docs/configuration.md} and the C{mcpx settings} table all come from the
L{Setting} records in L{SETTINGS}; nothing else lists them.

Unless a declaration says otherwise, C{pool.callTimeout} is read from
C{MCPX_POOL_CALL_TIMEOUT} and C{--pool-call-timeout}: C{MCPX_} and the name in
upper case with the dot and each camelCase boundary turned into C{_}, and the same
words in lower case joined by C{-} for the flag.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from attrs import Factory, field, frozen

from mcpx.settings.kinds import Kind
from mcpx.spec.revision import NEWEST_FIRST

#: The prefix of every mcpx environment variable.
ENV_PREFIX = "MCPX_"

_WORD_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def name_words(name: str) -> list[str]:
    """
    The words of a dotted camelCase name, in lower case.

    C{proto.stateTTL} is C{["proto", "state", "ttl"]}.
    """
    return [word.lower() for section in name.split(".") for word in _WORD_BOUNDARY.split(section)]


def env_name(name: str) -> str:
    """The environment variable a setting is read from unless declared otherwise."""
    return ENV_PREFIX + "_".join(name_words(name)).upper()


def flag_name(name: str) -> str:
    """The command-line flag a setting is read from unless declared otherwise."""
    return "--" + "-".join(name_words(name))


@frozen(kw_only=True)
class Setting:
    """
    One setting: its name, what it holds, its default and where it can be given.

    @ivar name: the dotted name used in the config file, e.g. C{pool.callTimeout}.
    @ivar default: the built-in value, already of the kind's Python type.
    @ivar minimum: for an integer, the smallest value accepted.
    @ivar choices: for a choice, the values accepted.
    """

    name: str
    kind: Kind
    default: object
    env: str = field(default=Factory(lambda self: env_name(self.name), takes_self=True))
    flag: str = field(default=Factory(lambda self: flag_name(self.name), takes_self=True))
    help: str
    minimum: int | None = None
    choices: tuple[str, ...] = ()

    @property
    def section(self) -> str:
        """The part before the dot: the object it nests under in the config file."""
        return self.name.split(".", 1)[0]

    @property
    def key(self) -> str:
        """The part after the dot: its key inside its section's object."""
        return self.name.split(".", 1)[1]

    @property
    def param(self) -> str:
        """The Python identifier click gives the flag's value."""
        return self.flag.lstrip("-").replace("-", "_")

    def parse_text(self, text: str, where: str) -> object:
        """Read this setting from a flag or an environment variable."""
        return self.kind.parse_text(text, where, minimum=self.minimum, choices=self.choices)

    def parse_json(self, value: object, where: str) -> object:
        """Read this setting from the config file."""
        return self.kind.parse_json(value, where, minimum=self.minimum, choices=self.choices)

    def to_text(self, value: object) -> str:
        """Write a value of this setting as it would be given in a flag."""
        return self.kind.to_text(value)

    def to_json(self, value: object) -> object:
        """Write a value of this setting as it would be given in the config file."""
        return self.kind.to_json(value)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        name="spec.precedence",
        kind=Kind.REVISION_LIST,
        default=NEWEST_FIRST,
        help="The order in which revisions win when two of them ask for incompatible "
        "behaviour and the peer's own revision does not settle it; the first listed wins. "
        "A partial list is completed with the revisions it leaves out, newest first.",
    ),
    Setting(
        name="spec.lenient",
        kind=Kind.REVISION_LIST,
        default=(),
        help="Revisions whose rules mcpx does not enforce to the letter. "
        "Empty means every revision is held strictly.",
    ),
    Setting(
        name="spec.first",
        kind=Kind.REVISION,
        default=None,
        env="MCPX_MCP_SPEC",
        flag="--mcp-spec",
        help="Moves one revision to the front of spec.precedence without restating the "
        "rest of the list. Unset leaves the precedence as it is.",
    ),
    Setting(
        name="mcp.passthrough",
        kind=Kind.STRING_LIST,
        default=(),
        env="MCPX_MCP_PASSTHROUGH",
        flag="--passthrough",
        help="Configured servers whose tools, prompts and resources are offered under "
        "their own names rather than through the gateway tools; name several with commas.",
    ),
    Setting(
        name="mcp.pageSize",
        kind=Kind.INTEGER,
        default=1000,
        minimum=1,
        help="The most items one page of a list mcpx answers on MCP holds (tools/list, "
        "prompts/list, resources/list, resources/templates/list, tasks/list); a longer "
        "list ends each page with a nextCursor for the next. A host that reads only the "
        "first page sees this many, and a host that follows every cursor makes one "
        "request per page.",
    ),
    Setting(
        name="pool.callTimeout",
        kind=Kind.DURATION,
        default=60.0,
        help="How long one call to an upstream server may run before it is abandoned. "
        "The clock pauses while a question the call asked is waiting for an answer.",
    ),
    Setting(
        name="pool.listWait",
        kind=Kind.DURATION,
        default=5.0,
        help="How long a listing across every server (mcpx tools, tools --search, prompts "
        "and resources; GET /v1/tools, /v1/prompts, /v1/resources; a host's prompts/list and "
        "resources/list of the gateway's own names; a host's lists, initialize and routing "
        "of pass-through servers) waits for a server that has not answered, "
        "because it is starting, hung or waiting to restart (and pool.probeTimeout longer, "
        "at most as long again, for a server met for the first time, whose era is probed "
        "first). Then the listing "
        "answers with the other servers, and with that server's cached catalogue if it has "
        "one; otherwise it names the server under errors as still starting. A pass-through "
        "server that is failing, or was not waited for in full before, is not waited for.",
    ),
    Setting(
        name="pool.startTimeout",
        kind=Kind.DURATION,
        default=30.0,
        help="How long starting an upstream server may take, once its era is known: the "
        "process or connection opened and its initialize (or server/discover) answered. "
        "A server that takes longer has failed to start, and is tried again after its "
        "back-off.",
    ),
    Setting(
        name="pool.probeTimeout",
        kind=Kind.DURATION,
        default=5.0,
        help="How long mcpx waits for a server it has not met before to answer the "
        "2026-07-28 probe (server/discover) before speaking an older revision to it. The "
        "era found is remembered in <state>/upstream-eras.json, so the probe runs once per "
        "server (instances started while it runs wait for its outcome).",
    ),
    Setting(
        name="pool.callMaxDuration",
        kind=Kind.DURATION,
        default=3600.0,
        help="How long a tool call that keeps reporting progress may run in all. Each "
        "progress report gives the call its timeout (pool.callTimeout, or the shorter one "
        "it asked for) again from that moment, but never past this from its start.",
    ),
    Setting(
        name="pool.idleTimeout",
        kind=Kind.DURATION,
        default=600.0,
        help="How long a started upstream server may go unused before the pool stops it.",
    ),
    Setting(
        name="pool.maxClientInstances",
        kind=Kind.INTEGER,
        default=16,
        minimum=1,
        help="The most instances a server with scope client runs at once, one per caller. "
        "A new caller beyond it replaces the least recently used idle instance; when "
        "every one is busy its call is refused (503 with Retry-After).",
    ),
    Setting(
        name="pool.maxAskingInstances",
        kind=Kind.INTEGER,
        default=32,
        minimum=1,
        help="The most instances a shared server runs once it is known to ask questions on "
        "its connection (it asked one there during a call): each call then gets an "
        "instance of its own, an idle one reused first, so its questions reach its own "
        "client rather than arriving among two calls' and being tied to neither. Beyond "
        "it calls share instances, and a question they ask may wait for mcpx elicit.",
    ),
    Setting(
        name="pool.cancelGrace",
        kind=Kind.DURATION,
        default=30.0,
        help="How long a request mcpx gave up on (the client cancelled or went away, or "
        "it timed out) still counts as running at its server, unless the server answers "
        "it first: a question the server asks meanwhile on that connection cannot be "
        "told apart from one for another client's call, so it waits in the broker. It "
        "does not hold back the same client's next call, whose questions reach it at "
        "once (a server may never answer a cancelled request).",
    ),
    Setting(
        name="tasks.maxPerClient",
        kind=Kind.INTEGER,
        default=200,
        minimum=1,
        help="The most tasks (running, or finished and not yet expired) one caller, as "
        "named by its Mcpx-Client header, may hold (an OAuth subject is one caller, "
        "whatever sessions or names it uses); beyond it its task calls get 429 with "
        "Retry-After while other callers still get tasks. 1000 tasks in all.",
    ),
    Setting(
        name="pool.stableAfter",
        kind=Kind.DURATION,
        default=10.0,
        help="How long an upstream server must stay up before its earlier crashes are "
        "forgotten. Until then each crash in a row doubles the wait before the next start "
        "(1s, 2s, 4s, ... up to 60s), however many calls it answered in between.",
    ),
    Setting(
        name="proto.native",
        kind=Kind.BOOLEAN,
        default=True,
        help="Put an upstream server's questions (elicitation, sampling) to the connected "
        "client first when it declared it can answer them. When off, every question "
        "waits in the broker.",
    ),
    Setting(
        name="proto.roots",
        kind=Kind.STRING_LIST,
        default=(),
        help="The roots mcpx answers a server's roots/list with when no host's roots are "
        "its to have: the calling client did not declare roots, or a shared server asked "
        "outside any single call (it never gets another host's): directories or file:// "
        "URIs, several with commas. Empty: no roots.",
    ),
    Setting(
        name="proto.askTimeout",
        kind=Kind.DURATION,
        default=600.0,
        help="The longest one client request may be held open while its questions are "
        "answered. A legacy client waits for all of it, so keep it below that client's "
        "own timeout.",
    ),
    Setting(
        name="proto.brokerWhenUnwatched",
        kind=Kind.CHOICE,
        default="refuse",
        choices=("refuse", "wait"),
        help="What becomes of a server's elicitation or sampling request that no calling "
        "client can be asked (it did not declare the capability, or the question cannot be "
        "tied to its call) while nobody watches mcpx's questions: no status page or other "
        "GET /v1/events stream that would show it, and no GET /v1/questions (mcpx elicit, "
        "mcpx call's watch) in the last 10 seconds. refuse: the server's request is refused "
        "at once with -32600, as a host without the capability answers it; wait: it waits in "
        "the broker until answered or its deadline, as it always does on a shared store "
        "(store.url), where another daemon of the fleet may be the one watched.",
    ),
    Setting(
        name="proto.askRounds",
        kind=Kind.INTEGER,
        default=8,
        minimum=1,
        help="How many times a single call may come back with another question before "
        "mcpx gives up on it as a server that never stops asking.",
    ),
    Setting(
        name="proto.stateTTL",
        kind=Kind.DURATION,
        default=1800.0,
        help="How long the requestState handed to a 2026-07-28 client can still be used "
        "to resume its request.",
    ),
    Setting(
        name="proto.stateKeyFile",
        kind=Kind.STRING,
        default="",
        help="The absolute path of a file of the keys requestState is signed with, shared "
        "by every daemon of a "
        "fleet so that any of them verifies a state another issued: one key a line, "
        "'<id> <since> <base64url secret of 32 bytes or more>', the newest key whose since "
        "has come signing and each older one verifying for proto.stateTTL after the next "
        "took over (docs/fleet.md). It must not be readable by other users. Empty: each "
        "daemon process makes a random key of its own when it starts.",
    ),
    Setting(
        name="proto.askTTL",
        kind=Kind.DURATION,
        default=900.0,
        help="How long a parked call waits for an answer before it is cancelled, and how "
        "long its result is kept for collection after it finishes.",
    ),
    Setting(
        name="proto.brokerTimeout",
        kind=Kind.DURATION,
        default=120.0,
        help="How long a question waiting in the broker (for mcpx elicit, /v1/questions or "
        "the status page) may wait for an answer before it expires. A server's question "
        "is then answered cancel; a tool call waiting there for the policy's confirmation "
        "(tools.confirm, confirmDestructive) is refused and never sent to its server.",
    ),
    Setting(
        name="protoMessages.taskAfter",
        kind=Kind.DURATION,
        default=5.0,
        help="How long a call to a tool that said nothing about task support runs before "
        "a 2026-07-28 client that accepts tasks is handed a task instead. Five seconds "
        "lets ordinary calls answer inline and turns only the slow ones into tasks.",
    ),
    Setting(
        name="protoMessages.listMaxAge",
        kind=Kind.DURATION,
        default=60.0,
        help="How long a 2026-07-28 client may reuse the answer to a list request (tools, "
        "prompts, resources, templates) or to server/discover before asking again.",
    ),
    Setting(
        name="protoMessages.readMaxAge",
        kind=Kind.DURATION,
        default=0.0,
        help="How long a 2026-07-28 client may reuse a resources/read result; 0s tells it "
        "not to cache what it read.",
    ),
    Setting(
        name="transport.stdioDrain",
        kind=Kind.DURATION,
        default=5.0,
        help="When standard input closes, how long requests still running get to send "
        "their answers before mcpx serve exits.",
    ),
    Setting(
        name="transport.sseKeepAlive",
        kind=Kind.DURATION,
        default=15.0,
        help="How long a slow HTTP response may stay silent before it turns into an event "
        "stream carrying a keep-alive comment at this interval, so that proxies with idle "
        "timeouts do not drop a call that is still running.",
    ),
    Setting(
        name="transport.allowedOrigins",
        kind=Kind.STRING_LIST,
        default=(),
        help="Browser origins allowed to call the HTTP endpoints besides loopback and the "
        "daemon's own address; a request with any other Origin is refused with 403.",
    ),
    Setting(
        name="transport.allowedHosts",
        kind=Kind.STRING_LIST,
        default=(),
        help="Names the daemon may be reached by over TCP besides localhost, loopback "
        "addresses and the address a connection arrived at: a name (any port) or name:port. "
        "A request with any other Host is refused with 403 (DNS-rebinding protection).",
    ),
    Setting(
        name="transport.maxMessageSize",
        kind=Kind.INTEGER,
        default=64 * 1024 * 1024,
        minimum=1024,
        help="The largest single JSON-RPC message, in bytes, that mcpx reads from a "
        "client or an upstream server; a larger one is refused. Upstream answers carry "
        "whole files and images (often twice: as content and as structuredContent), so "
        "the default is 64 MiB; an answer over the limit fails its call at once with an "
        "error naming this setting, and the server keeps serving.",
    ),
    Setting(
        name="daemon.pendingSignIns",
        kind=Kind.INTEGER,
        default=16,
        minimum=1,
        help="The most OAuth sign-ins (mcpx auth login) one principal (the owner, or each "
        "subject under daemon.auth oauth) may have waiting at once for the browser to come "
        "back; each waits at most 10 minutes. One more is refused with a message naming "
        "this setting.",
    ),
    Setting(
        name="transport.maxSessionsPerClient",
        kind=Kind.INTEGER,
        default=64,
        minimum=1,
        help="The most legacy Streamable HTTP sessions at /mcp one client keeps; the "
        "client is its OAuth subject, or else its Mcpx-Client header or declared name "
        "within its address (or the unix socket). A new session beyond it ends that "
        "client's least recently used idle one, or is refused with 429 when all are busy; "
        "1024 sessions in all, past which the subject or address holding the most ends "
        "its own.",
    ),
    Setting(
        name="transport.maxRequestBody",
        kind=Kind.INTEGER,
        default=4 * 1024 * 1024,
        minimum=1024,
        help="The largest HTTP request body, in bytes, held in memory (never on disk): a "
        "larger Content-Length gets 413 before the body is read, a chunked body is cut "
        "off with 413 as soon as it passes this size. Unlike transport.maxMessageSize it "
        "does not bound what upstream servers answer; a request must fit both.",
    ),
    Setting(
        name="transport.maxRequestBodyTotal",
        kind=Kind.INTEGER,
        default=64 * 1024 * 1024,
        minimum=1024,
        help="The bytes of HTTP request bodies the daemon holds at once, every connection "
        "together (at least transport.maxRequestBody). A body that would pass it gets 503 "
        "with Retry-After, so parallel uploads cannot exhaust memory.",
    ),
    Setting(
        name="transport.maxConnections",
        kind=Kind.INTEGER,
        default=1024,
        minimum=1,
        help="TCP connections open at once, every peer together, and never within 256 of "
        "the descriptor limit, so the unix sockets always answer. A connection over the "
        "cap gets 503 with Retry-After and is closed.",
    ),
    Setting(
        name="transport.maxConnectionsPerPeer",
        kind=Kind.INTEGER,
        default=128,
        minimum=1,
        help="TCP connections open at once from one peer address. A connection over the "
        "cap gets 503 with Retry-After and is closed.",
    ),
    Setting(
        name="transport.headerTimeout",
        kind=Kind.DURATION,
        default=10.0,
        help="How long an HTTP request may take, from its first byte, to deliver its "
        "headers; a slower one gets 408 and the connection is closed.",
    ),
    Setting(
        name="transport.bodyTimeout",
        kind=Kind.DURATION,
        default=30.0,
        help="How long an HTTP request may take, from the end of its headers, to deliver "
        "its body; a slower one gets 408 and the connection is closed. Answers (event "
        "streams, calls still running) are never cut by this or the header deadline.",
    ),
    Setting(
        name="transport.idleTimeout",
        kind=Kind.DURATION,
        default=60.0,
        help="How long an HTTP connection may wait for its first or next request before "
        "the daemon closes it.",
    ),
    Setting(
        name="transport.httpConnections",
        kind=Kind.INTEGER,
        default=16,
        minimum=1,
        help="How many idle connections to each remote (HTTP) server mcpx keeps open for "
        "reuse; a burst of concurrent calls opens more, and the surplus is closed once "
        "they finish.",
    ),
    Setting(
        name="exec.timeout",
        kind=Kind.DURATION,
        default=120.0,
        help="The longest a whole mcpx_exec program may run, every upstream call it makes "
        "included (a person answering a question it caused counts too). A call may ask for "
        "less with timeoutSec, never more; at the limit the program is stopped and the "
        "caller gets what it printed so far.",
    ),
    Setting(
        name="exec.maxRuns",
        kind=Kind.INTEGER,
        default=8,
        minimum=1,
        help="The most mcpx_exec programs running at once, each in a process of its own; "
        "one more is refused at once with an error saying so.",
    ),
    Setting(
        name="exec.maxMemory",
        kind=Kind.INTEGER,
        default=256 * 1024 * 1024,
        minimum=1024 * 1024,
        help="The most heap memory, in bytes, one mcpx_exec program may use; past it the "
        "program fails with MemoryError.",
    ),
    Setting(
        name="exec.maxOutput",
        kind=Kind.INTEGER,
        default=1024 * 1024,
        minimum=1024,
        help="The most bytes one mcpx_exec program may print; past it the program is "
        "stopped and the caller gets the first bytes and an error naming this setting.",
    ),
    Setting(
        name="exec.maxCalls",
        kind=Kind.INTEGER,
        default=1000,
        minimum=1,
        help="The most tool calls one mcpx_exec program may make; the call after the last "
        "one allowed stops the program with an error naming this setting.",
    ),
    Setting(
        name="exec.inlineMax",
        kind=Kind.INTEGER,
        default=64 * 1024,
        minimum=256,
        help="The largest mcpx_exec answer, in bytes, handed to the caller inline; a larger "
        "one is kept as an artifact (mcpx://artifacts/<run>/<name>) and the caller gets a "
        "preview and a link to read it.",
    ),
    Setting(
        name="exec.maxArtifactBytes",
        kind=Kind.INTEGER,
        default=64 * 1024 * 1024,
        minimum=1024,
        help="The most bytes one mcpx_exec program may write to its artifacts directory "
        "(/out); a write past it fails in the program with OSError.",
    ),
    Setting(
        name="exec.mode",
        kind=Kind.CHOICE,
        default="monty",
        choices=("monty", "cpython"),
        help="How mcpx_exec runs a program. monty: in the sandboxed interpreter, which can "
        "reach nothing but the tools and /out. cpython: under the real Python with the "
        "daemon user's rights and libraries, in its own process group, confined by bwrap "
        "or unshare where the machine allows (no network; else not at all); see "
        "docs/exec.md before turning it on.",
    ),
    Setting(
        name="exec.artifactChunk",
        kind=Kind.INTEGER,
        default=4 * 1024 * 1024,
        minimum=1024,
        help="The most bytes one ranged read of an artifact returns (POST /v1/artifacts/read "
        "with offset or length, mcpx artifacts read); a longer length is cut to it and the "
        "answer says where the next range starts. resources/read returns an artifact whole, "
        "up to transport.maxMessageSize once encoded, and refuses a larger one.",
    ),
    Setting(
        name="exec.artifactRetention",
        kind=Kind.DURATION,
        default=3600.0,
        help="How long the artifacts of a run are kept, from the end of the run; then they "
        "are deleted.",
    ),
    Setting(
        name="daemon.listen",
        kind=Kind.ENDPOINT_LIST,
        default=("tcp:8899:interface=127.0.0.1",),
        help="Twisted endpoint strings the daemon's HTTP server listens on, comma-separated. "
        "The unix socket <state>/mcpx.sock is always added by the daemon and is not part "
        "of this list.",
    ),
    Setting(
        name="daemon.auth",
        kind=Kind.AUTH,
        default="peer",
        choices=("peer", "token", "none"),
        help="Who may use the daemon over TCP (the unix socket is always its owner's): "
        "peer lets in loopback connections of the daemon's own user (Linux) and asks "
        "everyone else for the token in <state>/token (mcpx token prints it) as "
        "Authorization: Bearer; token asks every TCP client for it; none asks nobody. "
        'An object {"type": "oauth", "issuer": URL, "audience": URL, "scopes": [...]} '
        '(optional "jwksUri", and "introspection": {"url", "clientId", "clientSecret"} '
        "for opaque tokens) asks every TCP client for an access token from that "
        "authorization server (docs/auth.md).",
    ),
    Setting(
        name="daemon.allowUnauthenticatedNetwork",
        kind=Kind.BOOLEAN,
        default=False,
        help="Let the daemon start with daemon.auth none and a listener beyond loopback; "
        "without it that combination is refused, since anyone who can reach the port "
        "could run tools as this user.",
    ),
    Setting(
        name="daemon.logFile",
        kind=Kind.STRING,
        default="",
        help="The file the daemon writes its log to; empty means standard error.",
    ),
    Setting(
        name="daemon.logLevel",
        kind=Kind.CHOICE,
        default="info",
        choices=("debug", "info", "warn", "error"),
        help="The least severe level the daemon logs: debug, info, warn or error.",
    ),
    Setting(
        name="daemon.metricsMaxTools",
        kind=Kind.INTEGER,
        default=1000,
        minimum=0,
        help=(
            "The most (server, tool) pairs /metrics keeps series of its own for; calls to "
            "further tools are counted under the tool label _other."
        ),
    ),
    Setting(
        name="store.url",
        kind=Kind.STRING,
        default="",
        help="Where the daemon keeps its questions and tasks for other daemons to share: "
        "empty keeps them in a SQLite file in the state directory (one daemon, the default); "
        "a postgresql:// URL keeps them in that PostgreSQL database, which several daemons "
        "may share (docs/fleet.md). The URL never carries a literal password: use "
        "store.passwordFile, or ${NAME} in the password's place to read it from the "
        "environment variable NAME (libpq's PGPASSWORD and ~/.pgpass work too).",
    ),
    Setting(
        name="store.passwordFile",
        kind=Kind.STRING,
        default="",
        help="A file holding the password of the store.url database (one line; a systemd "
        "credential fits). Empty means the password comes from elsewhere, or none is needed.",
    ),
    Setting(
        name="store.threads",
        kind=Kind.INTEGER,
        default=4,
        minimum=1,
        help="How many PostgreSQL queries the daemon runs at once, each on a thread and a "
        "connection of its own, never on the event loop. Unused with SQLite.",
    ),
    Setting(
        name="trace.endpoint",
        kind=Kind.STRING,
        default="",
        help="The OTLP/HTTP URL the daemon sends OpenTelemetry traces of its requests to, "
        "such as http://127.0.0.1:4318/v1/traces (needs mcpx[trace]), read when the daemon "
        "starts. Empty, the default, makes no spans and loads nothing of OpenTelemetry.",
    ),
    Setting(
        name="trace.serviceName",
        kind=Kind.STRING,
        default="mcpx",
        help="The service.name of the daemon's traces, which tells several daemons apart "
        "in one collector; read when the daemon starts.",
    ),
    Setting(
        name="daemon.logFormat",
        kind=Kind.CHOICE,
        default="auto",
        choices=("auto", "text", "json"),
        help=(
            "How log lines are written: text (time, level, component, message and a failure's "
            "traceback, for people), json (one object per line of plain values, for programs "
            "and journald), or auto: text when the log goes to a terminal, json otherwise."
        ),
    ),
)

BY_NAME: Mapping[str, Setting] = {setting.name: setting for setting in SETTINGS}
BY_FLAG: Mapping[str, Setting] = {setting.flag: setting for setting in SETTINGS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(setting.section for setting in SETTINGS))
