# -*- test-case-name: tests.daemon.test_peers -*-
"""
Which local user is at the other end of a loopback TCP connection, or of a unix socket.

On Linux the kernel lists every TCP socket in C{/proc/net/tcp} and C{/proc/net/tcp6}
with the uid that opened it.  The client's socket of a connection the daemon accepted
is the line whose local address is the peer's address and whose remote address is the
daemon's; its uid is the user who connected.  Elsewhere the answer is C{None}, and the
gate asks for a token.

These files live in memory: reading them does not wait on a disk, but their length
grows with the number of sockets, so the gate asks once per connection, never per
request.

The same line names the client socket's inode, which the descriptors of the process
holding it point at: the gate asks whether one of the daemon's own upstream processes
holds it (L{mcpx.upstream.lineage}).

A unix socket says who is at the other end itself (C{SO_PEERCRED}, Linux): the
uid, and the pid of the process that connected.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Iterable

#: Where Linux lists the TCP sockets of the network namespace, IPv4 then IPv6.
PROC_NET_TCP: tuple[str, ...] = ("/proc/net/tcp", "/proc/net/tcp6")


def proc_address(host: str, port: int) -> tuple[str, ...]:
    """
    How C{host:port} is spelt in C{/proc/net/tcp*}: the address's bytes read as
    native-endian 32-bit words in upper-case hex, a colon, the port in hex.

    An IPv4 address has two spellings, its own and the IPv4-mapped IPv6 one, since a
    client's socket may be of either family whatever the daemon's is; an IPv4-mapped
    address is spelt both ways too.
    """
    address = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    suffix = f":{port:04X}"
    if isinstance(address, ipaddress.IPv4Address):
        (word,) = struct.unpack("=I", address.packed)
        mapped = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + address.packed)
        return (f"{word:08X}{suffix}", _v6_words(mapped) + suffix)
    return (_v6_words(address) + suffix,)


def _v6_words(address: ipaddress.IPv6Address) -> str:
    return "".join(f"{word:08X}" for word in struct.unpack("=4I", address.packed))


def socket_entry(
    lines: Iterable[str], peer: tuple[str, int], own: tuple[str, int]
) -> tuple[int, int] | None:
    """
    The uid and the inode of the client's socket of the connection from C{peer} to
    C{own}, found in the lines of C{/proc/net/tcp*}; C{None} when no line is that
    socket.
    """
    local = frozenset(proc_address(*peer))
    remote = frozenset(proc_address(*own))
    for line in lines:
        fields = line.split()
        # sl local_address rem_address st queues timer retransmits uid timeout inode ...
        if len(fields) > 9 and fields[1] in local and fields[2] in remote:
            try:
                return int(fields[7]), int(fields[9])
            except ValueError:
                return None
    return None


def _connecting(
    peer: tuple[str, int], own: tuple[str, int], tables: tuple[str, ...]
) -> tuple[int, int] | None:
    for table in tables:
        try:
            with open(table, encoding="ascii", errors="replace") as listing:
                entry = socket_entry(listing, peer, own)
        except OSError:
            continue
        if entry is not None:
            return entry
    return None


def connecting_uid(
    peer: tuple[str, int], own: tuple[str, int], tables: tuple[str, ...] = PROC_NET_TCP
) -> int | None:
    """
    The uid of the local user whose socket connected from C{peer} to C{own}, or
    C{None} when the system does not say (not Linux, or no such socket).
    """
    entry = _connecting(peer, own, tables)
    return None if entry is None else entry[0]


def connecting_inode(
    peer: tuple[str, int], own: tuple[str, int], tables: tuple[str, ...] = PROC_NET_TCP
) -> int | None:
    """
    The inode of the local socket that connected from C{peer} to C{own}: what the
    descriptors of the process holding it point at (C{socket:[inode]}).  C{None}
    when the system does not say, or the peer is not on this machine.
    """
    entry = _connecting(peer, own, tables)
    return None if entry is None else entry[1]


#: C{struct ucred}: pid, uid, gid.
_UCRED = struct.Struct("=iII")


def unix_peer_credentials(handle: object) -> tuple[int, int] | None:
    """
    The pid and uid of the process at the other end of the unix socket C{handle}
    (C{SO_PEERCRED}: the process that connected), or C{None} where the system or the
    handle cannot say.
    """
    option = getattr(socket, "SO_PEERCRED", None)
    getsockopt = getattr(handle, "getsockopt", None)
    if option is None or getsockopt is None:
        return None
    try:
        pid, uid, _gid = _UCRED.unpack(getsockopt(socket.SOL_SOCKET, option, _UCRED.size))
    except (OSError, struct.error):
        return None
    return int(pid), int(uid)


def unix_peer_uid(handle: object) -> int | None:
    """
    The uid of the process at the other end of the unix socket C{handle}
    (C{SO_PEERCRED}), or C{None} where the system or the handle cannot say.
    """
    credentials = unix_peer_credentials(handle)
    return None if credentials is None else credentials[1]


def unix_peer_pid(handle: object) -> int | None:
    """
    The pid of the process that connected the unix socket C{handle}
    (C{SO_PEERCRED}), or C{None} where the system or the handle cannot say.
    """
    credentials = unix_peer_credentials(handle)
    return None if credentials is None or credentials[0] <= 0 else credentials[0]
