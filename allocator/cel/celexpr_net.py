"""The Kubernetes ip, cidr and url libraries for cel-expr-python.

Like quantities and versions (celexpr_library), IP addresses, CIDRs and URLs travel through cel-cpp
as tagged ``bytes``: 0xFF (never valid UTF-8), a kind letter, and a canonical text, so that ``==``
of two encodings is upstream's equality (an address, or an address and prefix length, as Go's
netip compares them; a URL's parts). The parsing and the semantics are netlib's, shared with celpy.

``string(x)`` of an address or CIDR is cel-cpp's bytes conversion unless the backend rewrites it to
:data:`TO_STRING` (it does where the checker types ``x`` as one of them).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from cel_expr_python import cel

from allocator.cel import netlib

T = cel.Type

IP_TAG, CIDR_TAG, URL_TAG = b"\xffI", b"\xffC", b"\xffU"
KINDS = {IP_TAG: "net.IP", CIDR_TAG: "net.CIDR", URL_TAG: "kubernetes.URL"}
TO_STRING = "_ntstr"  # the same length as "string", so positions stay right


class _NoSuchOverload(TypeError):
    def __init__(self, function: str) -> None:
        super().__init__(f"no such overload: {function}")


def _encode_ip(address: netlib.IPAddress) -> bytes:
    return IP_TAG + str(address).encode()


def _encode_cidr(prefix: netlib.CIDRPrefix) -> bytes:
    return CIDR_TAG + str(prefix).encode()


_URL_FIELDS = tuple(netlib.URLValue.__dataclass_fields__)


def _encode_url(url: netlib.URLValue) -> bytes:
    return URL_TAG + json.dumps([getattr(url, name) for name in _URL_FIELDS]).encode()


@functools.lru_cache(maxsize=1024)
def _decoded(value: bytes) -> object:
    tag, text = value[:2], value[2:].decode()
    if tag == IP_TAG:
        return netlib.parse_ip(text)
    if tag == CIDR_TAG:
        return netlib.parse_cidr(text)
    return netlib.URLValue(*json.loads(text))


def _value(value: object, tag: bytes, function: str) -> Any:
    if isinstance(value, (bytes, bytearray)) and value[:2] == tag:
        return _decoded(bytes(value))
    raise _NoSuchOverload(function)


def _parser(parse: Callable[[str], Any], encode: Callable[[Any], bytes]) -> Callable[[str], bytes]:
    @functools.lru_cache(maxsize=1024)  # cel-cpp calls ip("10.0.0.1") on every evaluation
    def implementation(text: str) -> bytes:
        return encode(parse(text))

    return implementation


def _method(tag: bytes, function: str, method: Callable[[Any], Any]) -> Callable[[object], Any]:
    return lambda value: method(_value(value, tag, function))


def _contains(function: str, parse: Callable[[str], Any], tag: bytes,
              test: Callable[[netlib.CIDRPrefix, Any], bool]) -> Callable[[object, object], bool]:
    def implementation(prefix: object, other: object) -> bool:
        network = _value(prefix, CIDR_TAG, function)
        return test(network, parse(other) if isinstance(other, str) else _value(other, tag, function))

    return implementation


def _to_string(value: object) -> str:
    if isinstance(value, (bytes, bytearray)) and value[:2] in (IP_TAG, CIDR_TAG):
        return str(_decoded(bytes(value)))
    raise _NoSuchOverload("string")


def _overload(ident: str, result: Any, params: list[Any], impl: Callable[..., Any],
              member: bool = False) -> Any:
    return cel.Overload(ident, result, params, is_member=member, impl=impl)


def function_declarations() -> dict[str, list[Any]]:
    B, S, BOOL, INT = T.BYTES, T.STRING, T.BOOL, T.INT
    ip_tests = {
        "isUnspecified": netlib.IPAddress.is_unspecified,
        "isLoopback": netlib.IPAddress.is_loopback,
        "isLinkLocalMulticast": netlib.IPAddress.is_link_local_multicast,
        "isLinkLocalUnicast": netlib.IPAddress.is_link_local_unicast,
        "isGlobalUnicast": netlib.IPAddress.is_global_unicast,
    }
    url_getters: dict[str, Callable[[netlib.URLValue], str]] = {
        "getScheme": lambda u: u.scheme,
        "getHost": lambda u: u.host,
        "getHostname": netlib.URLValue.hostname,
        "getPort": netlib.URLValue.port,
        "getEscapedPath": netlib.URLValue.escaped_path,
    }
    return {
        "ip": [_overload("string_to_ip", B, [S], _parser(netlib.parse_ip, _encode_ip)),
               _overload("cidr_ip", B, [B], _method(CIDR_TAG, "ip", lambda c: _encode_ip(c.address)),
                         member=True)],
        "isIP": [_overload("is_ip", BOOL, [S], netlib.is_ip)],
        "ip.isCanonical": [_overload("ip_is_canonical", BOOL, [S], netlib.is_canonical_ip)],
        "family": [_overload("ip_family", INT, [B], _method(IP_TAG, "family", lambda a: a.family), True)],
        **{name: [_overload(f"ip_{name}", BOOL, [B], _method(IP_TAG, name, test), True)]
           for name, test in ip_tests.items()},
        "cidr": [_overload("string_to_cidr", B, [S], _parser(netlib.parse_cidr, _encode_cidr))],
        "isCIDR": [_overload("is_cidr", BOOL, [S], netlib.is_cidr)],
        "containsIP": [
            _overload(f"cidr_contains_ip_{kind}", BOOL, [B, param],
                      _contains("containsIP", netlib.parse_ip, IP_TAG, netlib.CIDRPrefix.contains_ip), True)
            for kind, param in (("string", S), ("ip", B))],
        "containsCIDR": [
            _overload(f"cidr_contains_cidr_{kind}", BOOL, [B, param],
                      _contains("containsCIDR", netlib.parse_cidr, CIDR_TAG, netlib.CIDRPrefix.contains_cidr),
                      True)
            for kind, param in (("string", S), ("cidr", B))],
        "prefixLength": [_overload("cidr_prefix_length", INT, [B],
                                   _method(CIDR_TAG, "prefixLength", lambda c: c.length), True)],
        "masked": [_overload("cidr_masked", B, [B],
                             _method(CIDR_TAG, "masked", lambda c: _encode_cidr(c.masked())), True)],
        "url": [_overload("string_to_url", B, [S], _parser(netlib.parse_url, _encode_url))],
        "isURL": [_overload("is_url_string", BOOL, [S], netlib.is_url)],
        **{name: [_overload(f"url_{name}", S, [B], _method(URL_TAG, name, getter), True)]
           for name, getter in url_getters.items()},
        "getQuery": [_overload("url_get_query", T.Map(S, T.List(S)), [B],
                               _method(URL_TAG, "getQuery", netlib.URLValue.query), True)],
        TO_STRING: [_overload("net_to_string", S, [B], _to_string)],
    }
