"""
The transport limits against a real daemon, as an attacker on loopback tries them:
a flood of idle connections, a gigabyte body, an endless chunked upload, a slowloris.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import selectors
import shutil
import socket
import tempfile
import time
from pathlib import Path

from twisted.trial.unittest import TestCase

from mcpx.daemon.limits import MAX_REFUSING
from tests.support.daemons import daemon_argv, daemon_environ, reap_on_cleanup, rss_bytes
from tests.support.http import TestClient
from tests.support.processes import ChildProcess, free_tcp_port, reactor, spawn


def spooled_files(pid: int) -> list[str]:
    """The daemon's open descriptors that are deleted or temporary files."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.endswith("(deleted)") or target.startswith(tempfile.gettempdir() + "/tmp"):
            found.append(target)
    return found


def wait_connected(batch: list[socket.socket], timeout: float = 5.0) -> None:
    """Wait until every socket of C{batch} has finished connecting (or failed to)."""
    with selectors.DefaultSelector() as pending:
        for s in batch:
            pending.register(s, selectors.EVENT_WRITE)
        deadline = time.monotonic() + timeout
        while pending.get_map() and time.monotonic() < deadline:
            for key, _ in pending.select(timeout=0.1):
                pending.unregister(key.fileobj)


class DaemonLimitsTests(TestCase):
    timeout = 90

    def setUp(self) -> None:
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-state-")
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.addCleanup(shutil.rmtree, self.state_dir, True)
        self.addCleanup(shutil.rmtree, self.config_home, True)
        self.socket = str(Path(self.state_dir) / "mcpx.sock")
        self.port = free_tcp_port()

    async def start(
        self, prefix: tuple[str, ...] = (), listen: str = "", **settings: str
    ) -> ChildProcess:
        env = daemon_environ(self.state_dir, self.config_home)
        env.update(settings)
        child = spawn([*prefix, *daemon_argv(self.port, listen_options=listen)], env=env)
        reap_on_cleanup(self, child)
        await child.wait_for(rb"listening on http://127\.0\.0\.1:\d+")
        return child

    async def stop(self, child: ChildProcess) -> None:
        # An answer first: a TERM sent while the daemon is still starting (its banner is
        # printed before the reactor installs its signal handlers) kills it outright.
        self.assertEqual(await self.unix_health(), 200)
        child.signal("TERM")
        self.assertEqual(await child.ended(), 0)

    def pid(self, child: ChildProcess) -> int:
        assert child.transport is not None and child.transport.pid
        return int(child.transport.pid)

    def raw(self, timeout: float = 5.0) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        self.addCleanup(s.close)
        return s

    async def unix_health(self) -> int:
        unix = TestClient(reactor, unix_socket=self.socket)
        try:
            code, _ = await unix.get_json("http://mcpx/health")
            return code
        finally:
            await unix.close()

    async def test_idle_connections_do_not_lock_out_the_unix_socket(self) -> None:
        """
        2,000 idle connections against a daemon held to 1,024 descriptors: those past
        the cap get 503 (or, in a burst, are closed at once), the daemon never runs out
        of descriptors, and the owner's unix socket still answers.
        """
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
        child = await self.start(
            ("prlimit", "--nofile=1024:1024"),
            # A backlog that holds the whole flood: with the default (50) the kernel
            # drops SYNs and the test waits out their retries.
            listen=":backlog=2048",
            MCPX_TRANSPORT_MAX_CONNECTIONS_PER_PEER="5000",
        )
        selector = selectors.DefaultSelector()
        self.addCleanup(selector.close)
        conns: list[socket.socket] = []

        def close_all() -> None:
            for s in conns:
                s.close()

        self.addCleanup(close_all)
        for _ in range(0, 2000, 100):
            batch = []
            for _ in range(100):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", self.port))
                batch.append(s)
            conns.extend(batch)
            wait_connected(batch)
            for s in batch:
                selector.register(s, selectors.EVENT_READ)
        refused = closed = 0
        deadline = time.monotonic() + 30
        while refused + closed < 2000 - 768 and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                selector.unregister(ready)
                try:
                    answer = ready.recv(4096)
                except OSError:
                    answer = b""
                if answer.startswith(b"HTTP/1.1 503"):
                    refused += 1
                    head, _, body = answer.partition(b"\r\n\r\n")
                    self.assertIn(b"Retry-After:", head)
                    self.assertEqual(json.loads(body)["error"]["code"], "too_many_connections")
                else:
                    # Closed at once while others were still being refused.
                    self.assertEqual(answer, b"")
                    closed += 1
        self.assertEqual(refused + closed, 2000 - 768)
        self.assertGreaterEqual(refused, MAX_REFUSING)
        self.assertNotIn("EMFILE", child.text(2), "the daemon never ran out of descriptors")
        self.assertEqual(await self.unix_health(), 200)
        refusals = [line for line in child.text(2).splitlines() if "refused a connection" in line]
        self.assertEqual(len(refusals), 1, "logged once")
        close_all()
        # The flood gone, TCP clients are let in again.
        tcp = TestClient(reactor)
        try:
            code, _ = await tcp.get_json(f"http://127.0.0.1:{self.port}/health")
        finally:
            await tcp.close()
        self.assertEqual(code, 200)
        await self.stop(child)

    async def test_the_soft_descriptor_limit_is_raised_to_the_hard_limit(self) -> None:
        child = await self.start(("prlimit", "--nofile=512:4096"))
        limits = Path(f"/proc/{self.pid(child)}/limits").read_text()
        line = next(line for line in limits.splitlines() if line.startswith("Max open files"))
        self.assertEqual(line.split()[3:5], ["4096", "4096"])
        self.assertIn("descriptor limit", child.text(2))
        await self.stop(child)

    async def test_a_gigabyte_content_length_is_refused_at_once(self) -> None:
        """POST with Content-Length: 1 GiB gets 413 JSON before a byte of the body is sent."""
        child = await self.start()
        for path in (b"/mcp", b"/v1/call"):
            s = self.raw()
            s.sendall(
                b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n"
            )
            answer = s.recv(65536)
            head, _, body = answer.partition(b"\r\n\r\n")
            self.assertTrue(head.startswith(b"HTTP/1.1 413"), answer)
            error = json.loads(body)["error"]
            self.assertEqual(error["code"], "body_too_large")
            self.assertIn("transport.maxRequestBody", error["message"])
            self.assertEqual(s.recv(10), b"", "the connection is closed")
        self.assertEqual(spooled_files(self.pid(child)), [])
        await self.stop(child)

    async def test_a_chunked_upload_is_cut_off_and_never_spooled(self) -> None:
        """
        A chunked body streamed past transport.maxRequestBody (1 MiB here) gets 413 and
        the connection ends; the daemon never opens a temporary file and its memory
        does not grow by what was sent.
        """
        child = await self.start(MCPX_TRANSPORT_MAX_REQUEST_BODY="1048576")
        pid = self.pid(child)
        before = rss_bytes(pid)
        s = self.raw()
        s.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"%x\r\n" % 65536 + b"x" * 65536 + b"\r\n"
        sent = 0
        answer = b""
        spooled: list[str] = []
        try:
            while sent < 256 * 1024 * 1024 and not answer:
                s.sendall(chunk)
                sent += 65536
                if sent == 512 * 1024:
                    time.sleep(0.2)
                    spooled = spooled_files(pid)
                if select.select([s], [], [], 0)[0]:
                    answer = s.recv(65536)
        except OSError:
            pass
        if not answer:
            s.settimeout(2)
            with contextlib.suppress(OSError):
                answer = s.recv(65536)
        self.assertEqual(spooled, [], "the body must not be written to a file")
        self.assertLess(sent, 16 * 1024 * 1024, "the upload must be cut off near the limit")
        self.assertTrue(answer.startswith(b"HTTP/1.1 413"), answer[:200])
        self.assertEqual(
            json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"], "body_too_large"
        )
        self.assertLess(rss_bytes(pid) - before, 8 * 1024 * 1024)
        self.assertEqual(spooled_files(pid), [])
        self.assertEqual(await self.unix_health(), 200)
        await self.stop(child)

    async def test_a_slowloris_is_disconnected_after_the_header_deadline(self) -> None:
        """A client dripping its headers gets 408 and is cut off after transport.headerTimeout."""
        child = await self.start(MCPX_TRANSPORT_HEADER_TIMEOUT="1s")
        s = self.raw(timeout=0.3)
        started = time.monotonic()
        request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
        answer = b""
        closed = False
        for byte in request:
            try:
                s.send(bytes([byte]))
                data = s.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
            if not data:
                closed = True
                break
            answer += data
        elapsed = time.monotonic() - started
        self.assertTrue(closed, "the connection must be closed")
        self.assertTrue(answer.startswith(b"HTTP/1.1 408"), answer)
        self.assertLess(elapsed, 10)
        await self.stop(child)
