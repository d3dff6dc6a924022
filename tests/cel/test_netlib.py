"""allocator.cel.netlib: Go's netip and net/url rules, which Python's ipaddress and urllib do not follow."""

from __future__ import annotations

import pytest

from allocator.cel import netlib


@pytest.mark.parametrize(("text", "canonical"), [
    ("1.2.3.4", "1.2.3.4"),
    ("::", "::"),
    ("2001:0DB8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),  # the first of equally long zero runs is compressed
    ("0:0:1:0:0:0:0:0", "0:0:1::"),
    ("1:0:0:1:0:0:0:1", "1:0:0:1::1"),
    ("::1.2.3.4", "::102:304"),  # embedded IPv4 in a non-mapped address is printed in hex
    ("1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"),
])
def test_ip_addresses_print_as_go_does(text: str, canonical: str) -> None:
    assert str(netlib.parse_ip(text)) == canonical


@pytest.mark.parametrize("text", [
    "", " 1.2.3.4", "1.2.3", "1.2.3.4.5", "1.2.3.04", "1.2.3.256", "::ffff:1.2.3.4", "::ffff:0102:0304",
    "fe80::1%eth0", "1::2::3", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7::8", "12345::", "1.2.3.4%z", "%z",
    "1:2:3:4:5:6:7:1.2.3.4", "[::1]",
])
def test_ip_addresses_upstream_refuses(text: str) -> None:
    assert not netlib.is_ip(text)
    with pytest.raises(netlib.NetParseError):
        netlib.parse_ip(text)


def test_ip_classes() -> None:
    ip = netlib.parse_ip
    assert ip("169.254.9.9").is_link_local_unicast() and ip("febf::1").is_link_local_unicast()
    assert ip("224.0.0.255").is_link_local_multicast() and not ip("224.0.1.0").is_link_local_multicast()
    assert ip("ff12::1").is_link_local_multicast()  # the flags nibble is ignored
    assert ip("10.0.0.1").is_global_unicast() and ip("fc00::1").is_global_unicast()
    assert not ip("255.255.255.255").is_global_unicast() and not ip("ff00::1").is_global_unicast()


@pytest.mark.parametrize("text", ["10.0.0.0/08", "10.0.0.0/+8", "10.0.0.0/", "10.0.0.0/33", "::/129",
                                  "10.0.0.0", "::ffff:1.2.3.4/120", "fe80::1%eth0/64", "10.0.0.0/٨"])
def test_prefixes_upstream_refuses(text: str) -> None:
    assert not netlib.is_cidr(text)


def test_prefix_keeps_its_host_bits_until_masked() -> None:
    prefix = netlib.parse_cidr("10.1.2.3/8")
    assert str(prefix) == "10.1.2.3/8" and str(prefix.masked()) == "10.0.0.0/8"
    assert prefix.contains_ip(netlib.parse_ip("10.200.0.1"))
    assert not prefix.contains_ip(netlib.parse_ip("::a01:203"))  # another family
    assert prefix.contains_cidr(netlib.parse_cidr("10.9.0.0/16"))
    assert not netlib.parse_cidr("10.0.0.0/16").contains_cidr(prefix)
    assert netlib.parse_cidr("0.0.0.0/0").contains_cidr(prefix)


def test_url_parts() -> None:
    url = netlib.parse_url("HTTPS://u:p@Example.com:8443/a%20b/%2F?x=1&y=a+b&x=2&bad;=1&%zz=3#f")
    assert (url.scheme, url.host, url.hostname(), url.port()) == ("https", "Example.com:8443", "Example.com",
                                                                   "8443")
    assert url.escaped_path() == "/a%20b/%2F"  # kept as written: it unescapes to the same path
    assert url.query() == {"x": ["1", "2"], "y": ["a b"]}
    assert netlib.parse_url("https://[::1]:80/").hostname() == "::1"
    assert netlib.parse_url("mailto:x@y").opaque == "x@y"


@pytest.mark.parametrize(("text", "accepted"), [
    ("/path", True), ("path", False), ("", False), ("*", True), ("http://a b", False),
    ("http://[::1", False), ("http://[1.2.3.4]/", False), ("http://a:80x", False), ("http://%41", False),
    ("http://a:b:80/", False),  # http(s) takes the first colon as the port's (Go's urlstrictcolons)
    ("ftp://a:b:80/", True), ("https://example.com:/x", True), ("http://x/\x7f", False),
    ("http://a/%zz", False), ("1http://a", False), ("http://u p@a/", False),
])
def test_is_url_is_request_uri_parsing(text: str, accepted: bool) -> None:
    assert netlib.is_url(text) is accepted
