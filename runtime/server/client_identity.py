"""Who a request counts against: something the caller cannot choose.

Every header is the caller's to write, and so, on loopback, is the source address: a process
binds any of 127.0.0.0/8's sixteen million addresses before it connects. So a client is:

- **on loopback**, the machine account that owns the connecting socket (``local:uid=1000``),
  asked of the kernel by the connection's four-tuple (Linux: netlink's socket diagnostics, as
  ``ss`` does; else the row of ``/proc/net/tcp`` or ``tcp6`` whose local end is the peer's
  address and port and whose remote end is the service's). Two users of
  one machine are two clients; every process of one user is one client, whatever address it
  binds. Where the table cannot be read (another system), all of loopback is one client
  (``local``);
- **off loopback**, its IPv4 address, or the /64 network of its IPv6 address (one host is given a
  whole /64 and can pick any address in it).

The answer is kept on the connection: a connection's peer does not change.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from typing import Any

LOCAL = "local"
#: the tables of the kernel's TCP sockets, by address family
_TABLES = {4: "/proc/net/tcp", 6: "/proc/net/tcp6"}
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _kernel_hex(ip: IPAddress) -> str:
    """An address as the kernel's socket table prints it: each 32-bit word in host order."""
    packed = ip.packed
    return "".join(f"{struct.unpack('=I', packed[i:i + 4])[0]:08X}" for i in range(0, len(packed), 4))


def _forms(ip: IPAddress) -> list[tuple[int, IPAddress]]:
    """The tables and forms an address's socket may be listed under: an IPv4 client of a
    dual-stack listener appears to it as ``::ffff:a.b.c.d`` but its own socket is IPv4."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return [(4, ip.ipv4_mapped), (6, ip)]
    return [(ip.version, ip)]


#: netlink's socket-diagnostics protocol, and its request for one socket of a family
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, _NLMSG_ERROR = 4, 20, 1, 2
_NO_COOKIE = 0xFFFFFFFF


def _diag_owner(version: int, peer: IPAddress, peer_port: int, ours: IPAddress, our_port: int) -> int | None:
    """The uid of one TCP socket, asked of the kernel by its four-tuple (netlink ``sock_diag``:
    what ``ss`` uses): an exact lookup, whatever the number of sockets."""
    family = socket.AF_INET if version == 4 else socket.AF_INET6
    pad = 16 - len(peer.packed)
    sockid = struct.pack("!HH", peer_port, our_port) + peer.packed + b"\0" * pad + ours.packed + b"\0" * pad
    sockid += struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
    req = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    msg = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0) + req
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(1.0)
            nl.send(msg)
            answer = nl.recv(4096)
    except (OSError, AttributeError):  # no netlink here (another system, a sandbox)
        return None
    if len(answer) < 16 + 4 + 48 + 20:
        return None
    kind = struct.unpack_from("=H", answer, 4)[0]
    if kind != _SOCK_DIAG_BY_FAMILY:  # NLMSG_ERROR: no such socket
        return None
    return int(struct.unpack_from("=I", answer, 16 + 4 + 48 + 12)[0])


def _table_owner(version: int, peer: IPAddress, peer_port: int, ours: IPAddress, our_port: int) -> int | None:
    """The same from ``/proc/net/tcp`` or ``tcp6``, where netlink cannot be used (a table read
    in pieces can miss a row while sockets come and go: netlink is asked first)."""
    needle = f"{_kernel_hex(peer)}:{peer_port:04X} {_kernel_hex(ours)}:{our_port:04X}"
    try:
        with open(_TABLES[version], encoding="ascii") as table:
            text = table.read()
    except OSError:
        return None
    at = text.find(" " + needle + " ")
    if at < 0:
        return None
    line = text[text.rfind("\n", 0, at) + 1:text.find("\n", at)].split()
    if len(line) > 7 and line[1] + " " + line[2] == needle and line[7].isascii() and line[7].isdigit():
        return int(line[7])
    return None


def socket_owner(peer: IPAddress, peer_port: int, ours: IPAddress, our_port: int) -> int | None:
    """The uid that owns the socket at ``peer:peer_port`` connected to ``ours:our_port`` on this
    machine (Linux); None where the kernel cannot say."""
    for (version, p), (_, o) in zip(_forms(peer), _forms(ours)):
        for lookup in (_diag_owner, _table_owner):
            uid = lookup(version, p, peer_port, o, our_port)
            if uid is not None:
                return uid
    return None


def identity_of(peername: Any, sockname: Any) -> str:
    """The client a connection from ``peername`` to ``sockname`` (the transport's extra info)
    counts as."""
    if isinstance(peername, str) or not peername:
        return LOCAL  # a Unix socket: only this machine reaches it
    try:
        peer = ipaddress.ip_address(str(peername[0]).split("%")[0])
    except ValueError:
        return "?"
    mapped = peer.ipv4_mapped if isinstance(peer, ipaddress.IPv6Address) else None
    if peer.is_loopback or (mapped is not None and mapped.is_loopback):
        try:
            ours = ipaddress.ip_address(str(sockname[0]).split("%")[0])
            uid = socket_owner(peer, int(peername[1]), ours, int(sockname[1]))
        except (ValueError, TypeError, IndexError):
            uid = None
        return LOCAL if uid is None else f"{LOCAL}:uid={uid}"
    if mapped is not None:
        return str(mapped)
    if isinstance(peer, ipaddress.IPv6Address):
        return str(ipaddress.ip_network(f"{peer}/64", strict=False))
    return str(peer)


def connection_identity(protocol: Any, transport: Any) -> str:
    """A connection's client, worked out once and kept on its protocol object."""
    known = getattr(protocol, "client_identity", None)
    if isinstance(known, str):
        return known
    if transport is None:
        return "?"
    who = identity_of(transport.get_extra_info("peername"), transport.get_extra_info("sockname"))
    try:
        protocol.client_identity = who
    except AttributeError:  # a protocol with slots and no such field: worked out again next time
        pass
    return who
