"""Conformance cases for the Kubernetes ip, cidr and url libraries, run against every engine.

Every expected result is what upstream (cel-go with the Kubernetes base environment, v0.37.1)
answers: Go's netip and net/url parsing with the Kubernetes restrictions (no zones, no IPv4-mapped
IPv6, no leading zeros), errors for unparsable text, cel-go's typing of the opaque types.
"""

from __future__ import annotations

from case import DEFAULT_DEVICE, CelCase

D = 'device.attributes["gpu.example.com"]'
NET_DEVICE = {
    **DEFAULT_DEVICE,
    "attributes": {**DEFAULT_DEVICE["attributes"], "addr": {"string": "10.1.2.3"},
                   "endpoint": {"string": "https://node-1.example.com:8443/metrics?format=json"}},
}


def _cases(prefix: str, rows: list[tuple[str, object]], **extra: object) -> list[CelCase]:
    return [CelCase(f"{prefix}: {expression}", expression, expect, device=NET_DEVICE,  # type: ignore[arg-type]
                    **extra) for expression, expect in rows]


IP = _cases("ip", [
    ('ip("1.2.3.4").family() == 4', True),
    ('ip("2001:db8::1").family() == 6', True),
    ('ip("::1").isLoopback() && ip("127.0.0.2").isLoopback()', True),
    ('ip("fe80::1").isLinkLocalUnicast() && ip("169.254.0.1").isLinkLocalUnicast()', True),
    ('ip("ff02::1").isLinkLocalMulticast() && ip("224.0.0.5").isLinkLocalMulticast()', True),
    ('ip("10.0.0.1").isGlobalUnicast() && !ip("255.255.255.255").isGlobalUnicast()', True),
    ('ip("0.0.0.0").isUnspecified() && ip("::").isUnspecified()', True),
    ('ip.isCanonical("2001:db8::1") && !ip.isCanonical("2001:DB8::1")', True),
    ('ip.isCanonical("bad")', "runtime_error"),
    ('isIP("::1.2.3.4") && isIP("1:2:3:4:5:6:1.2.3.4")', True),
    ('isIP("::ffff:1.2.3.4") || isIP("1.2.3.04") || isIP("fe80::1%eth0") || isIP(" 1.2.3.4")', False),
    ('isIP("1:2:3:4:5:6:7:8:9") || isIP("1::2::3") || isIP("1.2.3") || isIP("")', False),
    ('ip("1.2.3.4") == ip("1.2.3.4") && ip("::1") == ip("::0:1")', True),
    ('ip("1.2.3.4") in [ip("1.2.3.4")]', True),
    ('string(ip("2001:0db8:0:0:1:0:0:1")) == "2001:db8::1:0:0:1"', True),
    ('string(ip("0:0:1:0:0:0:0:0")) == "0:0:1::"', True),
    ('cel.bind(a, ip("1.2.3.4"), string(a)) == "1.2.3.4"', True),
    (f"ip({D}.addr).family() == 4", True),
    ('ip("bad").family() == 4', "runtime_error"),
    ('dyn(cidr("1.2.3.4/8")).family() == 4', "runtime_error"),
    ('ip("1.2.3.4") < ip("1.2.3.5")', "compile_error"),
    ('ip("1.2.3.4") == cidr("1.2.3.4/32")', "compile_error"),
    ('ip("1.2.3.4").family() == "4"', "compile_error"),
    ("ip(1)", "compile_error"),
])

CIDR = _cases("cidr", [
    ('cidr("10.0.0.0/8").containsIP("10.1.2.3")', True),
    ('cidr("10.0.0.0/8").containsIP(ip("11.1.2.3")) || cidr("10.0.0.0/8").containsIP("::1")', False),
    ('cidr("10.0.0.0/8").containsIP("bad")', "runtime_error"),
    (f"cidr('10.0.0.0/8').containsIP({D}.addr)", True),
    ('cidr("10.0.0.0/8").containsCIDR("10.1.0.0/16")', True),
    ('cidr("10.0.0.0/16").containsCIDR(cidr("10.0.0.0/8"))', False),
    ('cidr("10.0.0.0/8").prefixLength() == 8', True),
    ('string(cidr("10.1.2.3/8").masked()) == "10.0.0.0/8" && string(cidr("10.1.2.3/8")) == "10.1.2.3/8"',
     True),
    ('string(cidr("10.1.2.3/8").ip()) == "10.1.2.3"', True),
    ('isCIDR("10.0.0.0/08") || isCIDR("10.0.0.0/33") || isCIDR("10.0.0.0/+8") || isCIDR("10.0.0.0")', False),
    ('isCIDR("::ffff:1.2.3.4/120") || isCIDR("fe80::1%eth0/64")', False),
    ('cidr("10.0.0.0/8") == cidr("10.0.0.0/8")', True),
    ('cidr("10.0.0.1/8") == cidr("10.0.0.0/8")', False),
    ('cidr("10.0.0.0/8").containsIP(1)', "compile_error"),
])

URL = _cases("url", [
    ('url("https://user:pw@example.com:8080/a%20b/c?x=1#frag").getHost() == "example.com:8080"', True),
    ('url("https://example.com:8080/a?x=1").getHostname() == "example.com"', True),
    ('url("https://example.com:8080/a?x=1").getPort() == "8080"', True),
    ('url("https://example.com/a%20b/c").getEscapedPath() == "/a%20b/c"', True),
    ('url("https://example.com/a%2fb").getEscapedPath() == "/a%2fb"', True),
    ('url("HTTPS://example.com").getScheme() == "https"', True),
    ('url("https://[::1]:80/").getHostname() == "::1"', True),
    ('url("https://example.com/?a=1&a=2;b").getQuery() == {"a": ["1"]}', True),
    ('url("https://example.com/?a=1&a=2&b").getQuery() == {"a": ["1", "2"], "b": [""]}', True),
    ('url("/a/b?c").getEscapedPath() == "/a/b" && url("http://a/x#y").getEscapedPath() == "/x"', True),
    (f'url({D}.endpoint).getPort() == "8443"', True),
    ('isURL("/path") && isURL("mailto:x@y") && isURL("https://example.com:/x")', True),
    ('isURL("path") || isURL("") || isURL("http://a b") || isURL("http://[::1") || isURL("http://a:80x")',
     False),
    ('isURL("http://%41") || isURL("http://a:b:80/")', False),
    ('url("http://a/") == url("http://a/")', True),
    ('url("a") == url("a")', "runtime_error"),
    ('url("http://a/b%zz").getPort() == ""', "runtime_error"),
    ('string(url("http://a")) == "http://a"', "compile_error"),
])

CASES: list[CelCase] = [*IP, *CIDR, *URL]
