"""Finding the user behind a loopback TCP connection (L{mcpx.daemon.peers})."""

from __future__ import annotations

import os
import socket
import sys
import tempfile

from twisted.trial.unittest import SkipTest, SynchronousTestCase

from mcpx.daemon.peers import PROC_NET_TCP, connecting_uid, proc_address, socket_entry

#: Two lines of /proc/net/tcp: a listener on 127.0.0.1:8899 and a client of it,
#: 127.0.0.1:40000, opened by uid 1000 (on a little-endian machine).
LISTING = [
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid",
    "   0: 0100007F:22C3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0  0 1",
    "   1: 0100007F:9C40 0100007F:22C3 01 00000000:00000000 00:00000000 00000000  1000  0 2",
    "   2: 0100007F:22C3 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0  0 3",
]


class ProcAddressTests(SynchronousTestCase):
    def setUp(self) -> None:
        if sys.byteorder != "little":
            raise SkipTest("the spellings below are a little-endian machine's")

    def test_spellings(self) -> None:
        """An IPv4 address is spelt as itself and IPv4-mapped; IPv6 as four words."""
        self.assertEqual(
            proc_address("127.0.0.1", 8899),
            ("0100007F:22C3", "0000000000000000FFFF00000100007F:22C3"),
        )
        self.assertEqual(proc_address("::ffff:127.0.0.1", 8899), proc_address("127.0.0.1", 8899))
        self.assertEqual(proc_address("::1", 80), ("00000000000000000000000001000000:0050",))

    def test_client_socket_is_found(self) -> None:
        """The client's line is the one whose local end is the peer; the server's is not."""
        peer, own = ("127.0.0.1", 40000), ("127.0.0.1", 8899)
        self.assertEqual(socket_entry(LISTING, peer, own), (1000, 2))
        self.assertIsNone(socket_entry(LISTING, ("127.0.0.1", 40001), own))
        self.assertIsNone(socket_entry(LISTING[:1], peer, own))


class ConnectingUidTests(SynchronousTestCase):
    def test_real_connection(self) -> None:
        """A connection this process opens is found to be its own user's, over v4 and v6."""
        if not all(os.path.exists(table) for table in PROC_NET_TCP):
            raise SkipTest("no /proc/net/tcp here")
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            with socket.socket(family) as server, socket.socket(family) as client:
                server.bind((host, 0))
                server.listen()
                client.connect(server.getsockname()[:2])
                accepted, peer = server.accept()
                with accepted:
                    own = accepted.getsockname()[:2]
                    self.assertEqual(connecting_uid(peer[:2], own), os.getuid(), host)

    def test_no_tables(self) -> None:
        """Without the tables (not Linux), nobody is known."""
        missing = os.path.join(tempfile.mkdtemp(), "tcp")
        self.assertIsNone(connecting_uid(("127.0.0.1", 1), ("127.0.0.1", 2), (missing,)))
