"""This machine's own non-loopback address, to check that a port is closed to anything but loopback."""

from __future__ import annotations

import socket

from common.addresses import is_loopback


def own_address() -> str | None:
    """This machine's own IPv4 address on the interface of its default route, found without sending
    anything (connecting a UDP socket only chooses the route), or None without one. A connection to it
    stays on this machine but does not come from loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if is_loopback(address) else address


def port_of(url: str) -> int:
    """The port of an http(s)://host:port[/path] URL."""
    return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
