"""Which addresses are loopback: for a peer (is this connection from inside the pod?) and for a listening
address (can anything outside the pod reach this port?)."""

from __future__ import annotations

import ipaddress


def is_loopback(address: str) -> bool:
    """Whether `address` (an IP address, or `localhost`) is a loopback address. A wildcard address,
    another host name or anything unparsable is not: a name may resolve to anything."""
    if address.strip().lower() in ("localhost", "localhost."):
        return True
    try:
        ip = ipaddress.ip_address(address.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    # An IPv4 address on an IPv6 socket is ::ffff:a.b.c.d (not is_loopback before Python 3.13).
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback
