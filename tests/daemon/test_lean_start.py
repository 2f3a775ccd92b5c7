"""
C{mcpx daemon} starts without the TLS machinery, and loads it when an C{https} server
needs it; nor does an idle daemon hold what only an unconfigured feature uses.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase, TestCase

from mcpx.daemon.lean_start import needs_tls
from tests.support.daemons import daemon_environ
from tests.support.http import TestClient
from tests.support.processes import ChildProcess, kill_on_cleanup, reactor, spawn
from tests.upstream.test_remote_faults import RoughServer, _pem_pair

#: Run as C{python -c}: C{python -m mcpx} with its arguments, and on C{SIGUSR1} one line on
#: stdout naming every module imported so far.
_LISTING_MCPX = """
import runpy, signal, sys

def listing(signum, frame):
    names = sorted(name for name, module in sys.modules.items() if module is not None)
    sys.stdout.write("modules: " + " ".join(names) + "\\n")
    sys.stdout.flush()

signal.signal(signal.SIGUSR1, listing)
sys.argv[0] = "mcpx"
runpy.run_module("mcpx", run_name="__main__", alter_sys=True)
"""

#: Packages an idle daemon with the default configuration has no use for: pyOpenSSL and
#: cryptography (TLS listeners and https servers), the standard library's ssl and
#: OpenSSL-backed hashes (each loads libcrypto; hashlib's own implementations serve),
#: the Prometheus client (which imports ssl; /metrics is written by mcpx), PyJWT (the
#: OAuth resource server), jsonschema and referencing (validation, loaded at the first
#: schema checked), sqlite3 (the question store, at the first question), click (a line of
#: setting flags is read without it, mcpx.cli.daemon_start) and treq with what it imports
#: (the sign-ins' HTTP client is made at the first sign-in; HTTP servers make their own),
#: OpenTelemetry with the protobuf and requests its exporter uses (only with
#: trace.endpoint set, mcpx.tracing), and RE2 (its library and the C++ runtime it links,
#: about 2 MB: loaded at the first pattern compiled, an op's at its first input), and
#: msgspec (its JSON reader, about 0.8 MB: made at the first text read, mcpx.wire.jsontext).
_NOT_WHEN_IDLE = (
    "opentelemetry",
    "google",
    "requests",
    "OpenSSL",
    "cryptography",
    "ssl",
    "_ssl",
    "_hashlib",
    "prometheus_client",
    "jwt",
    "jsonschema",
    "referencing",
    "sqlite3",
    "click",
    "treq",
    "multipart",
    "re2",
    "msgspec",
)

#: What only a started upstream or a sign-in uses: the sessions of either era (made when a
#: server is first connected, mcpx.upstream.probe), the HTTP server channels (made for a
#: remote server's first connection, mcpx.upstream.connect), and the HTTP client they and
#: the sign-ins' client are made of, with Twisted's (mcpx.upstream.first_use).
_UPSTREAM_STARTED = frozenset(
    {
        "mcpx.upstream.legacy_session",
        "mcpx.upstream.modern_session",
        "mcpx.upstream.http",
        "mcpx.upstream.http_sse",
        "mcpx.upstream.http_client",
        "twisted.web.client",
        "twisted.web._newclient",
    }
)


def _maps_cryptography(pid: int) -> bool:
    """Whether cryptography's native library is mapped into process C{pid}."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return any("/cryptography/" in line for line in maps.splitlines())


class NeedsTlsTests(SynchronousTestCase):
    def test_plain_listeners(self) -> None:
        """Unix and plain TCP listeners (or none) let the daemon start without TLS."""
        self.assertFalse(needs_tls([]))
        self.assertFalse(needs_tls([""]))
        self.assertFalse(needs_tls(["unix:/tmp/x.sock:mode=600", "tcp:8899:interface=127.0.0.1"]))
        self.assertFalse(needs_tls(["TCP6:8899"]))

    def test_other_listeners(self) -> None:
        """An C{ssl:} listener, or a kind mcpx cannot judge, keeps the TLS machinery."""
        self.assertTrue(needs_tls(["tcp:1", "ssl:8443:privateKey=k.pem"]))
        self.assertTrue(needs_tls(["systemd:domain=INET:index=0"]))


class LeanDaemonTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-state-")
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.socket = str(Path(self.state_dir) / "mcpx.sock")

    def start(self, servers: dict[str, object]) -> tuple[ChildProcess, int]:
        config = Path(self.state_dir) / "config.json"
        config.write_text(json.dumps({"servers": servers}))
        env = daemon_environ(self.state_dir, self.config_home)
        env["MCPX_CONFIG"] = str(config)
        argv = [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", ""]
        child = spawn(argv, env=env)
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        return child, int(child.transport.pid)

    async def test_idle_daemon_imports(self) -> None:
        """
        A daemon with the default configuration and one stdio server, answering on its
        socket but not yet asked anything, has imported none of L{_NOT_WHEN_IDLE}.
        """
        config = Path(self.state_dir) / "config.json"
        demo = {"command": sys.executable, "args": ["-m", "mcpx.demo"]}
        config.write_text(json.dumps({"servers": {"demo": demo}}))
        env = daemon_environ(self.state_dir, self.config_home)
        env["MCPX_CONFIG"] = str(config)
        argv = [sys.executable, "-c", _LISTING_MCPX, "daemon", "--daemon-listen", ""]
        child = spawn(argv, env=env)
        self.addCleanup(kill_on_cleanup, child)
        await child.wait_for(rb"listening on unix socket")
        client = TestClient(reactor, unix_socket=self.socket)
        self.addCleanup(client.close)
        response = await client.http.get("http://mcpx/health")
        self.assertEqual(response.code, 200)
        assert child.transport is not None
        child.transport.signalProcess(signal.SIGUSR1)
        line = await child.wait_for(rb"modules: [^\n]*\n", fd=1)
        modules = set(line.decode().split()[1:])
        # The listing is the daemon's own: its service and the reactor are in it.
        self.assertIn("mcpx.daemon.service", modules)
        self.assertIn("twisted.internet.epollreactor", modules)
        loaded = sorted(name for name in modules if name.partition(".")[0] in _NOT_WHEN_IDLE)
        self.assertEqual(loaded, [])
        # Nor the commands that ask a daemon, nor the click group they belong to.
        self.assertEqual({"mcpx.cli.main", "mcpx.cli.commands", "mcpx.cli.client"} & modules, set())
        # Nor what only a started upstream uses (L{_UPSTREAM_STARTED}).
        self.assertEqual(sorted(_UPSTREAM_STARTED & modules), [])
        await self.stop(child)

    async def stop(self, child: ChildProcess) -> None:
        child.signal("TERM")
        await child.ended()

    async def test_https_server_after_a_lean_start(self) -> None:
        """
        An idle daemon has not loaded cryptography; a call to an C{https} server with a
        private CA works, and only then is it loaded.
        """
        ca_key, ca_cert, ca_pem, _ = _pem_pair("test CA", [], ca=True)
        ca_file = os.path.join(self.state_dir, "ca.pem")
        Path(ca_file).write_bytes(ca_pem)
        from twisted.internet.ssl import PrivateCertificate

        _, _, cert_pem, key_pem = _pem_pair("server", ["127.0.0.1"], issuer=(ca_key, ca_cert))
        rough = RoughServer()
        rough.http.start(tls=PrivateCertificate.loadPEM(cert_pem + key_pem).options())
        self.addCleanup(rough.http.stop)
        self.assertTrue(rough.http.url.startswith("https://"))

        child, pid = self.start({"secure": {"url": rough.http.url, "tls": {"ca": ca_file}}})
        await child.wait_for(rb"listening on unix socket")
        self.assertFalse(_maps_cryptography(pid))

        client = TestClient(reactor, unix_socket=self.socket)
        self.addCleanup(client.close)
        response = await client.http.post(
            "http://mcpx/v1/call", json={"server": "secure", "tool": "charge", "arguments": {}}
        )
        import treq

        body = json.loads(await treq.content(response))
        self.assertEqual(response.code, 200, body)
        self.assertTrue(body["ran"])
        self.assertTrue(_maps_cryptography(pid))
        await self.stop(child)
