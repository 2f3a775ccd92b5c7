# -*- test-case-name: tests.daemon.test_process -*-
"""C{mcpx daemon}: start the service tree, say where it listens, run until stopped."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import IO

from twisted.internet.defer import Deferred, FirstError, gatherResults
from twisted.internet.interfaces import IListeningPort

from mcpx._version import __version__
from mcpx.daemon.limits import raise_descriptor_limit
from mcpx.daemon.listeners import cannot_listen, exposure_warning
from mcpx.daemon.logs import begin_logging, log_observer, open_log_stream
from mcpx.daemon.process import reload_on_sighup, settle_memory, stop_on_signals
from mcpx.daemon.root import IDaemonReactor
from mcpx.daemon.sdnotify import forget_systemd_variables
from mcpx.daemon.service import DaemonConfig, make_service, prepare_state_dir
from mcpx.server.mcp_socket import SOCKET_NAME as MCP_SOCKET_NAME
from mcpx.settings.errors import SettingsError
from mcpx.settings.resolve import Settings
from mcpx.upstream.lineage import become_subreaper, become_undumpable


def describe_port(port: IListeningPort) -> str:
    """A URL a person can paste: http://host:port for TCP, the socket path for unix."""
    host = port.getHost()
    if hasattr(host, "port") and hasattr(host, "host"):
        address = f"[{host.host}]" if ":" in host.host else host.host
        return f"http://{address}:{host.port}"
    name = getattr(host, "name", None)
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    return f"unix socket {name}"


def cli_name() -> str:
    """How the person who started the daemon can run the CLI: on PATH, or beside Python."""
    beside = Path(sys.executable).parent / "mcpx"
    if shutil.which("mcpx") == str(beside) or not beside.exists():
        return "mcpx"
    return str(beside)


def http_host_lines(url: str, auth: str) -> list[str]:
    """How an HTTP host reaches C{/mcp} at C{url}, and when it must send the token."""
    entry = f'{{"type": "http", "url": "{url}/mcp"'
    with_token = entry + ', "headers": {"Authorization": "Bearer <mcpx token>"}}'
    if auth == "none":
        return [f"  HTTP host: {entry}}}   (daemon.auth none: no token asked)"]
    if auth == "oauth":
        return [f"  HTTP host: {entry}}}   (daemon.auth oauth: an access token from its issuer)"]
    lines = []
    if auth == "peer":
        lines.append(f"  HTTP host as this user on loopback: {entry}}}   (no token needed)")
    lines.append(f"  HTTP host otherwise: {with_token}   (`{cli_name()} token` prints the token)")
    return lines


def page_note(auth: str) -> str:
    """How a browser gets into the status page, under C{daemon.auth} C{auth}."""
    signs_in = f"`{cli_name()} status --open` signs a browser in"
    if auth == "none":
        return "(daemon.auth none: no token asked)"
    if auth == "peer":
        return f"(this user's browser on this machine; elsewhere {signs_in})"
    return f"({signs_in})"


async def run_daemon(
    reactor: IDaemonReactor, settings: Settings, config: DaemonConfig, console: IO[str]
) -> None:
    """
    Run the daemon until the reactor stops.

    @param console: where the human-readable banner and warnings go (stderr: stdout
        is never the daemon's to write).
    """
    # Read into C{config} by now; nothing the daemon starts may speak for it to systemd.
    forget_systemd_variables(os.environ)
    begin_logging(
        log_observer(
            open_log_stream(settings.string("daemon.logFile")),
            settings.string("daemon.logLevel"),
            config.masker,
            settings.string("daemon.logFormat"),
        )
    )
    prepare_state_dir(config.state_dir)
    raise_descriptor_limit()
    try:
        service = make_service(config, reactor)
    except SettingsError as e:
        print(f"mcpx: {e}", file=console)
        raise SystemExit(2) from None
    # What upstreams fork and leave becomes the daemon's, to be found and ended.
    become_subreaper()
    # And they, running as its user, cannot read its environment or attach to it.
    become_undumpable()
    for description in config.exposed_endpoints():
        print(exposure_warning(description, config.auth), file=console)
    reactor.addSystemEventTrigger("before", "shutdown", service.stopService)
    reload_on_sighup(service, reactor)
    # Once running: the reactor installs its own SIGTERM and SIGINT handlers as it starts.
    reactor.callWhenRunning(stop_on_signals, service, reactor)
    # The banner says the daemon runs only once it does: after the reactor has started and
    # put its signal handlers (and those above) in place, so a SIGTERM sent on reading it
    # stops the daemon cleanly instead of killing it.
    running: Deferred[None] = Deferred()
    reactor.callWhenRunning(running.callback, None)
    service.startService()
    try:
        ports = await gatherResults(
            [listener.when_listening() for listener in service.listeners], consumeErrors=True
        )
    except FirstError as e:
        failed = service.listeners[e.index].description
        print(cannot_listen(failed, e.subFailure), file=console)
        raise SystemExit(1) from None
    await running
    settle_memory()
    print(f"mcpx {__version__} daemon is running (Ctrl-C stops it).", file=console)
    for port in ports:
        where = describe_port(port)
        if where.startswith("http"):
            print(f"  listening on {where}", file=console)
            print(f"    MCP (Streamable HTTP):  {where}/mcp", file=console)
            print(f"    REST API:  {where}/v1   (described by {where}/openapi.json)", file=console)
            print(f"    status page:  {where}/   {page_note(config.auth)}", file=console)
        elif where.endswith(MCP_SOCKET_NAME):
            print(
                f"  MCP over stdio: hosts run `{cli_name()} serve` (it connects here)", file=console
            )
        else:
            print(f"  listening on {where}", file=console)
            print(
                f"    try: curl --unix-socket {where.split()[-1]} http://mcpx/v1/servers",
                file=console,
            )
    print(
        '  host config: {"mcpServers": {"mcpx": {"command": "'
        + cli_name()
        + '", "args": ["serve"]}}}   (docs/hosts.md)',
        file=console,
    )
    urls = [where for where in map(describe_port, ports) if where.startswith("http")]
    if urls:
        for line in http_host_lines(urls[0], config.auth):
            print(line, file=console)
    servers = sorted(config.servers.servers) if config.servers is not None else []
    if servers:
        print(f"  upstream servers: {', '.join(servers)} (started on first use)", file=console)
        cli = cli_name()
        print(
            f"  try: {cli} tools   |   {cli} call {servers[0]} <tool> key=value ...", file=console
        )
        assert config.servers is not None
        for name, why in config.servers.misconfigured.items():
            print(f"  warning: server {name} cannot start: {why}", file=console)
    console.flush()
    await Deferred()
