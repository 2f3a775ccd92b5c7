"""
The gate's first rule, driven in memory: a connection opened by one of the daemon's
own upstream processes is refused on every route, whatever the token says, decided
once per connection (L{mcpx.daemon.gate.Gate}'s C{upstreams}); and C{mcpx serve}'s
socket refuses the same processes (L{mcpx.daemon.gate.upstream_door}).
"""

from __future__ import annotations

import os
import socket

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.gate import UPSTREAM_CODE, Gate, HostRule, OriginRule, upstream_door
from mcpx.daemon.site import DaemonSite, SiteOptions
from mcpx.daemon.token import TokenFile
from tests.daemon.fake_pool import daemon_http
from tests.daemon.test_gate import LOOPBACK_CLIENT, OWNER, ROUTES, UNIX, GateCase
from tests.support.logs import observe_log

#: The inode of the socket an upstream holds, and the pid of an upstream's process.
UPSTREAM_INODE = 777
UPSTREAM_PID = 5151


class FakeUpstreams:
    """The daemon's upstream processes as the gate asks about them, counting the asks."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def owns_pid(self, pid: int) -> bool:
        self.asked.append(("pid", pid))
        return pid == UPSTREAM_PID

    def owns_peer(self, pid: int, since: int | None) -> bool:
        return self.owns_pid(pid)

    def owns_socket(self, inode: int) -> bool:
        self.asked.append(("socket", inode))
        return inode == UPSTREAM_INODE


class UpstreamGateTests(GateCase):
    auth = "token"

    def setUp(self) -> None:
        GateCase.setUp(self)
        self.upstreams = FakeUpstreams()
        self.inodes: dict[tuple[str, int], int] = {}
        self.inode_lookups: list[tuple[str, int]] = []
        self.unix_pid: int | None = None
        http = daemon_http(clock=self.clock, pid=4242)
        self.gate = Gate(
            http.resource(),
            origins=OriginRule(self.allowed_origins),
            hosts=HostRule(self.allowed_hosts),
            auth=self.auth,
            token=TokenFile(self.state, self.clock.seconds),
            uid=OWNER,
            lookup_uid=self.lookup,
            lookup_unix_uid=self.lookup_unix,
            upstreams=self.upstreams,
            lookup_unix_pid=lambda request: self.unix_pid,
            lookup_inode=self.lookup_inode,
        )
        self.site = DaemonSite(self.gate, self.clock, SiteOptions(opened=self.gate.connection_made))

    def lookup_inode(self, peer: tuple[str, int], own: tuple[str, int]) -> int | None:
        self.inode_lookups.append(peer)
        return self.inodes.get(peer)

    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def test_upstream_socket_refused_on_every_route_even_with_the_token(self) -> None:
        """
        A loopback connection whose socket an upstream holds gets 403 upstream_process
        on every route, /health included, though it sends the daemon's token.
        """
        self.inodes[(LOOPBACK_CLIENT.host, LOOPBACK_CLIENT.port)] = UPSTREAM_INODE
        for method, path, _ in ROUTES:
            answer = self.send(method, path, self.bearer())
            self.assertRefused(answer, 403, UPSTREAM_CODE, path)
            self.assertIn("upstream", answer.json()["error"]["message"])

    def test_user_socket_passes(self) -> None:
        """A loopback connection no upstream holds gets what the token gives it."""
        self.inodes[(LOOPBACK_CLIENT.host, LOOPBACK_CLIENT.port)] = 123
        for method, path, status in ROUTES:
            self.assertEqual(self.send(method, path, self.bearer()).status, status, path)

    def test_decided_once_per_connection(self) -> None:
        """A kept-alive connection is looked up at its first request only."""
        self.inodes[(LOOPBACK_CLIENT.host, LOOPBACK_CLIENT.port)] = UPSTREAM_INODE
        connection = self.connect()
        for _ in range(3):
            answer = self.send("GET", "/v1/servers", self.bearer(), connection=connection)
            self.assertRefused(answer, 403, UPSTREAM_CODE, "/v1/servers")
        self.assertEqual(self.inode_lookups, [(LOOPBACK_CLIENT.host, LOOPBACK_CLIENT.port)])
        self.assertEqual(self.upstreams.asked, [("socket", UPSTREAM_INODE)])

    def test_refusal_logged_once(self) -> None:
        """Refusals of upstream connections are logged once, not once per request."""
        self.inodes[(LOOPBACK_CLIENT.host, LOOPBACK_CLIENT.port)] = UPSTREAM_INODE
        events = observe_log(self)
        for _ in range(3):
            self.send("GET", "/v1/servers", self.bearer())
        refused = [e for e in events if "refused a request" in e.get("log_format", "")]
        self.assertEqual([e["code"] for e in refused], [UPSTREAM_CODE])

    def test_unix_socket_upstream_pid_refused(self) -> None:
        """On a unix socket the pid that connected decides, before the socket's owner."""
        self.unix_pid = UPSTREAM_PID
        answer = self.send("GET", "/v1/servers", own=UNIX, peer=UNIX)
        self.assertRefused(answer, 403, UPSTREAM_CODE, "/v1/servers")
        self.unix_pid = UPSTREAM_PID + 1
        self.assertEqual(self.send("GET", "/v1/servers", own=UNIX, peer=UNIX).status, 503)

    def test_unix_socket_judged_as_it_is_made(self) -> None:
        """
        A unix connection is judged as it is made, before it sends anything: one an
        upstream's process made is refused though the pid behind it says otherwise by
        its first request.
        """
        self.unix_pid = UPSTREAM_PID
        connection = self.connect(own=UNIX, peer=UNIX)
        self.assertEqual(self.upstreams.asked, [("pid", UPSTREAM_PID)])
        self.unix_pid = UPSTREAM_PID + 1
        answer = self.send("GET", "/v1/servers", own=UNIX, peer=UNIX, connection=connection)
        self.assertRefused(answer, 403, UPSTREAM_CODE, "/v1/servers")

    def test_unix_socket_judged_again_at_its_first_request(self) -> None:
        """
        A unix connection let in as it was made is asked about again at its first
        request, and no more after that.
        """
        self.unix_pid = UPSTREAM_PID + 1
        connection = self.connect(own=UNIX, peer=UNIX)
        self.unix_pid = UPSTREAM_PID
        for _ in range(2):
            answer = self.send("GET", "/v1/servers", own=UNIX, peer=UNIX, connection=connection)
            self.assertRefused(answer, 403, UPSTREAM_CODE, "/v1/servers")
        self.assertEqual(self.upstreams.asked, [("pid", UPSTREAM_PID + 1), ("pid", UPSTREAM_PID)])

    def test_remote_peer_passes(self) -> None:
        """
        A connection from another machine holds no local socket: the lookup finds
        none, and the token lets it in.
        """
        own = IPv4Address("TCP", "10.0.0.5", 8899)
        peer = IPv4Address("TCP", "10.0.0.9", 50000)
        answer = self.send(
            "GET", "/v1/servers", {"Host": "10.0.0.5:8899", **self.bearer()}, own=own, peer=peer
        )
        self.assertEqual(answer.status, 503)
        self.assertEqual(self.inode_lookups, [(peer.host, peer.port)])
        self.assertEqual(self.upstreams.asked, [])

    def test_local_peer_on_another_address_looked_up(self) -> None:
        """
        A listener on 0.0.0.0 is reached from any of this machine's addresses: a
        connection to one address from another (neither loopback) is looked up too,
        once, and an upstream's is refused though it sends the token.
        """
        own = IPv4Address("TCP", "10.0.0.5", 8899)
        peer = IPv4Address("TCP", "172.17.0.1", 50002)
        self.inodes[(peer.host, peer.port)] = UPSTREAM_INODE
        connection = self.connect(own=own, peer=peer)
        for _ in range(2):
            answer = self.send(
                "GET",
                "/v1/servers",
                {"Host": "10.0.0.5:8899", **self.bearer()},
                connection=connection,
            )
            self.assertRefused(answer, 403, UPSTREAM_CODE, "/v1/servers")
        self.assertEqual(self.inode_lookups, [(peer.host, peer.port)])

    def test_local_peer_on_an_outer_address_looked_up(self) -> None:
        """
        A connection to a non-loopback listener from this machine's own address is
        still local: its socket is looked up, and an upstream's is refused.
        """
        own = IPv4Address("TCP", "10.0.0.5", 8899)
        peer = IPv4Address("TCP", "10.0.0.5", 50001)
        self.inodes[(peer.host, peer.port)] = UPSTREAM_INODE
        answer = self.send(
            "GET", "/v1/servers", {"Host": "10.0.0.5:8899", **self.bearer()}, own=own, peer=peer
        )
        self.assertRefused(answer, 403, UPSTREAM_CODE, "/v1/servers")


class _Transport(StringTransport):
    """A string transport over a real unix socket's handle, as a listener's is."""

    def __init__(self, handle: socket.socket) -> None:
        StringTransport.__init__(self)
        self.handle = handle

    def getHandle(self) -> socket.socket:
        return self.handle


class OwnPid(FakeUpstreams):
    def __init__(self, owned: bool) -> None:
        FakeUpstreams.__init__(self)
        self.owned = owned

    def owns_pid(self, pid: int) -> bool:
        self.asked.append(("pid", pid))
        return self.owned


class UpstreamDoorTests(SynchronousTestCase):
    def test_mcp_socket_asks_about_the_pid_that_connected(self) -> None:
        """
        C{upstream_door} asks about the pid at the other end of the socket
        (C{SO_PEERCRED}) and says why an upstream's connection is refused.
        """
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        self.addCleanup(theirs.close)
        for owned in (True, False):
            upstreams = OwnPid(owned)
            why = upstream_door(upstreams)(_Transport(ours))
            self.assertEqual(upstreams.asked, [("pid", os.getpid())])
            if owned:
                assert why is not None
                self.assertIn("upstream servers", why)
            else:
                self.assertIsNone(why)
