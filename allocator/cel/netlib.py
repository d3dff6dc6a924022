"""Values and parsing of the Kubernetes CEL ip, cidr and url libraries, shared by both CEL engines.

Upstream parses with Go's net/netip and net/url, whose rules differ from Python's ipaddress and
urllib in many places, so the parsers here are written to Go's rules, plus the Kubernetes
restrictions: an IP address or prefix must not carry a zone nor be an IPv4-mapped IPv6 address;
IPv4 octets must not have leading zeros; a prefix length is plain decimal. ``url()`` accepts what
both ``url.ParseRequestURI`` and ``url.Parse`` accept, ``isURL()`` what ``ParseRequestURI`` does.

Errors are raised as :class:`NetParseError` with upstream's message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class NetParseError(ValueError):
    """A string that is no IP address, CIDR or URL under upstream's rules."""


# -- IP addresses -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class IPAddress:
    """An IPv4 (``bits`` 32) or IPv6 (``bits`` 128) address without zone."""

    bits: int
    value: int

    @property
    def family(self) -> int:
        return 4 if self.bits == 32 else 6

    def byte(self, index: int) -> int:
        return (self.value >> (self.bits - 8 * (index + 1))) & 0xFF

    def __str__(self) -> str:
        if self.bits == 32:
            return ".".join(str(self.byte(i)) for i in range(4))
        groups = [(self.value >> (112 - 16 * i)) & 0xFFFF for i in range(8)]
        # the longest run of two or more zero groups (the first of equals) becomes "::"
        best_start, best_length, start = -1, 1, -1
        for i, group in enumerate([*groups, 1]):
            if group == 0 and start < 0:
                start = i
            elif group != 0 and start >= 0:
                if i - start > best_length:
                    best_start, best_length = start, i - start
                start = -1
        if best_start < 0:
            return ":".join(f"{g:x}" for g in groups)
        head = ":".join(f"{g:x}" for g in groups[:best_start])
        tail = ":".join(f"{g:x}" for g in groups[best_start + best_length:])
        return f"{head}::{tail}"

    def is_unspecified(self) -> bool:
        return self.value == 0

    def is_loopback(self) -> bool:
        return self.byte(0) == 127 if self.bits == 32 else self.value == 1

    def is_multicast(self) -> bool:
        return self.byte(0) & 0xF0 == 0xE0 if self.bits == 32 else self.byte(0) == 0xFF

    def is_link_local_multicast(self) -> bool:
        if self.bits == 32:
            return self.value >> 8 == 0xE00000  # 224.0.0.0/24
        return (self.value >> 112) & 0xFF0F == 0xFF02

    def is_link_local_unicast(self) -> bool:
        if self.bits == 32:
            return self.value >> 16 == 0xA9FE  # 169.254.0.0/16
        return (self.value >> 112) & 0xFFC0 == 0xFE80

    def is_global_unicast(self) -> bool:
        if self.bits == 32 and self.value == 0xFFFFFFFF:
            return False
        return not (self.is_unspecified() or self.is_loopback() or self.is_multicast()
                    or self.is_link_local_unicast())


def _ipv4_fields(text: str) -> int:
    """The 32-bit value of dotted-decimal ``text`` (Go's rules: four fields, no leading zeros)."""
    value, octet, digits, fields = 0, 0, 0, 0
    for i, char in enumerate(text):
        if "0" <= char <= "9":
            if digits == 1 and octet == 0:
                raise NetParseError("IPv4 field has octet with leading zero")
            octet = octet * 10 + ord(char) - 48
            digits += 1
            if octet > 255:
                raise NetParseError("IPv4 field has value >255")
        elif char == ".":
            if i == 0 or i == len(text) - 1 or text[i - 1] == ".":
                raise NetParseError("IPv4 field must have at least one digit")
            if fields == 3:
                raise NetParseError("IPv4 address too long")
            value, octet, digits, fields = value << 8 | octet, 0, 0, fields + 1
        else:
            raise NetParseError("unexpected character")
    if fields < 3:
        raise NetParseError("IPv4 address too short")
    return value << 8 | octet


def _hex_field(text: str) -> tuple[int, int]:
    """The value of the hex digits at the start of ``text`` and how many there are."""
    value, count = 0, 0
    for char in text:
        digit = "0123456789abcdef".find(char.lower()) if char.isascii() else -1
        if digit < 0:
            break
        value = value << 4 | digit
        count += 1
        if count > 4:
            raise NetParseError("each colon-separated field must have at most 4 hex digits")
    if count == 0:
        raise NetParseError("each colon-separated field must have at least one digit")
    return value, count


def _ipv6(text: str) -> tuple[int, str]:
    """The 128-bit value of ``text`` and its zone (Go's netip rules)."""
    rest, zone = text, ""
    if "%" in rest:
        rest, zone = rest.split("%", 1)
        if not zone:
            raise NetParseError("zone must be a non-empty string")
    groups: list[int] = []
    ellipsis = -1
    if rest.startswith("::"):
        ellipsis, rest = 0, rest[2:]
        if not rest:
            return 0, zone
    while len(groups) < 8:
        value, count = _hex_field(rest)
        if count < len(rest) and rest[count] == ".":
            if ellipsis < 0 and len(groups) != 6:
                raise NetParseError("embedded IPv4 address must replace the final 2 fields of the address")
            if len(groups) > 6:
                raise NetParseError("too many hex fields to fit an embedded IPv4 at the end of the address")
            v4 = _ipv4_fields(rest)
            groups += [v4 >> 16, v4 & 0xFFFF]
            rest = ""
            break
        groups.append(value)
        rest = rest[count:]
        if not rest:
            break
        if rest[0] != ":":
            raise NetParseError("unexpected character, want colon")
        if len(rest) == 1:
            raise NetParseError("colon must be followed by more characters")
        rest = rest[1:]
        if rest[0] == ":":
            if ellipsis >= 0:
                raise NetParseError("multiple :: in address")
            ellipsis, rest = len(groups), rest[1:]
            if not rest:
                break
    if rest:
        raise NetParseError("trailing garbage after address")
    if len(groups) < 8:
        if ellipsis < 0:
            raise NetParseError("address string too short")
        groups[ellipsis:ellipsis] = [0] * (8 - len(groups))
    elif ellipsis >= 0:
        raise NetParseError("the :: must expand to at least one field of zeros")
    value = 0
    for group in groups:
        value = value << 16 | group
    return value, zone


def _go_parse_addr(text: str) -> tuple[IPAddress, str]:
    """Go's netip.ParseAddr: the address and its zone; NetParseError with Go's reason."""
    for char in text:
        if char == ".":
            return IPAddress(32, _ipv4_fields(text)), ""
        if char == ":":
            value, zone = _ipv6(text)
            return IPAddress(128, value), zone
        if char == "%":
            raise NetParseError("missing IPv6 address")
    raise NetParseError("unable to parse IP")


def _is_4in6(address: IPAddress) -> bool:
    return address.bits == 128 and address.value >> 32 == 0xFFFF


def parse_ip(text: str) -> IPAddress:
    """``ip(text)``: an address without zone that is not IPv4-mapped IPv6."""
    try:
        address, zone = _go_parse_addr(text)
    except NetParseError as err:
        raise NetParseError(f'IP Address "{text}" parse error during conversion from string: {err}') from None
    if zone:
        raise NetParseError(f'IP address "{text}" with zone value is not allowed')
    if _is_4in6(address):
        raise NetParseError(f'IPv4-mapped IPv6 address "{text}" is not allowed')
    return address


def _parses(parse: Callable[[str], object], text: str) -> bool:
    try:
        parse(text)
    except NetParseError:
        return False
    return True


def is_ip(text: str) -> bool:
    return _parses(parse_ip, text)


def is_canonical_ip(text: str) -> bool:
    """``ip.isCanonical(text)``; raises NetParseError when it is no IP address."""
    return str(parse_ip(text)) == text


# -- CIDR prefixes ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CIDRPrefix:
    """An address and a prefix length; the address keeps its host bits (see ``masked``)."""

    address: IPAddress
    length: int

    def __str__(self) -> str:
        return f"{self.address}/{self.length}"

    def masked(self) -> CIDRPrefix:
        host_bits = self.address.bits - self.length
        value = self.address.value >> host_bits << host_bits
        return CIDRPrefix(IPAddress(self.address.bits, value), self.length)

    def _same_network(self, address: IPAddress, length: int) -> bool:
        shift = self.address.bits - length
        return self.address.value >> shift == address.value >> shift

    def contains_ip(self, address: IPAddress) -> bool:
        return address.bits == self.address.bits and self._same_network(address, self.length)

    def contains_cidr(self, other: CIDRPrefix) -> bool:
        """Upstream's test: the prefixes overlap and this one is no longer than the other."""
        if other.address.bits != self.address.bits:
            return False
        overlaps = self._same_network(other.address, min(self.length, other.length))
        return overlaps and self.length <= other.length


def parse_cidr(text: str) -> CIDRPrefix:
    """``cidr(text)``, with Go's netip.ParsePrefix rules and the Kubernetes restrictions."""
    def fail(reason: str) -> NetParseError:
        return NetParseError("network address parse error during conversion from string: "
                             f"network address parse error during conversion from string: {reason}")

    slash = text.rfind("/")
    if slash < 0:
        raise fail(f'netip.ParsePrefix("{text}"): no \'/\'')
    try:
        address, zone = _go_parse_addr(text[:slash])
    except NetParseError as err:
        raise fail(f'netip.ParsePrefix("{text}"): ParseAddr("{text[:slash]}"): {err}') from None
    if zone and address.bits == 128:
        raise fail(f'netip.ParsePrefix("{text}"): IPv6 zones cannot be present in a prefix')
    bits = text[slash + 1:]
    if (len(bits) > 1 and not "1" <= bits[0] <= "9") or not bits.isascii() or not bits.isdigit():
        raise fail(f'netip.ParsePrefix("{text}"): bad bits after slash: "{bits}"')
    length = int(bits)
    if length > address.bits:
        raise fail(f'netip.ParsePrefix("{text}"): prefix length out of range')
    if _is_4in6(address):
        raise fail(f'IPv4-mapped IPv6 address "{text}" is not allowed')
    return CIDRPrefix(address, length)


def is_cidr(text: str) -> bool:
    return _parses(parse_cidr, text)


# -- URLs -------------------------------------------------------------------------------------------

_PATH, _PATH_SEGMENT, _HOST, _ZONE, _USER_PASSWORD, _QUERY_COMPONENT, _FRAGMENT = range(7)
_UNRESERVED = set("-_.~")
_RESERVED = set("$&+,/:;=?@")
_HOST_EXTRA = set("!$&'()*+,;=:[]<>\"")


def _should_escape(char: str, mode: int) -> bool:
    """Whether Go's net/url escapes the byte ``char`` in ``mode`` (every non-ASCII byte)."""
    if char.isascii() and char.isalnum():
        return False
    if mode in (_HOST, _ZONE) and char in _HOST_EXTRA:
        return False
    if char in _UNRESERVED:
        return False
    if char in _RESERVED:
        if mode == _PATH:
            return char == "?"
        if mode == _PATH_SEGMENT:
            return char in "/;,?"
        if mode == _USER_PASSWORD:
            return char in "@/?:"
        if mode == _QUERY_COMPONENT:
            return True
        if mode == _FRAGMENT:
            return False
    return not (mode == _FRAGMENT and char in "!()*")


_HEX = "0123456789abcdefABCDEF"


def _escape_error(text: str) -> NetParseError:
    return NetParseError(f'invalid URL escape "{text}"')


def _unescape(text: str, mode: int) -> str:
    """Go's url unescape: validates, then decodes %XX (and + in query components)."""
    i = 0
    while i < len(text):
        char = text[i]
        if char == "%":
            if i + 2 >= len(text) or text[i + 1] not in _HEX or text[i + 2] not in _HEX:
                raise _escape_error(text[i:i + 3])
            if mode == _HOST and int(text[i + 1], 16) < 8 and text[i:i + 3] != "%25":
                raise _escape_error(text[i:i + 3])
            if mode == _ZONE:
                byte = chr(int(text[i + 1:i + 3], 16))
                if text[i:i + 3] != "%25" and byte != " " and _should_escape(byte, _HOST):
                    raise _escape_error(text[i:i + 3])
            i += 3
            continue
        if mode in (_HOST, _ZONE) and char.isascii() and _should_escape(char, mode):
            raise NetParseError(f'invalid character "{char}" in host name')
        i += 1
    if "%" not in text and not (mode == _QUERY_COMPONENT and "+" in text):
        return text
    out = bytearray()
    i = 0
    while i < len(text):
        char = text[i]
        if char == "%":
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
            continue
        out += (b" " if char == "+" and mode == _QUERY_COMPONENT else char.encode())
        i += 1
    return out.decode("utf-8", errors="replace")


def _escape(text: str, mode: int) -> str:
    out = []
    for byte in text.encode():
        char = chr(byte)
        if byte < 0x80 and not _should_escape(char, mode):
            out.append(char)
        elif char == " " and mode == _QUERY_COMPONENT:
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def _valid_optional_port(port: str) -> bool:
    return port == "" or (port[0] == ":" and all("0" <= c <= "9" for c in port[1:]))


@dataclass(frozen=True, slots=True)
class URLValue:
    """A URL as Go's url.Parse splits it."""

    scheme: str = ""
    opaque: str = ""
    user: str | None = None
    host: str = ""
    path: str = ""
    raw_path: str = ""
    omit_host: bool = False
    force_query: bool = False
    raw_query: str = ""
    fragment: str = ""

    def _split_host_port(self) -> tuple[str, str]:
        host, port = self.host, ""
        colon = host.rfind(":")
        if colon >= 0 and _valid_optional_port(host[colon:]):
            host, port = host[:colon], host[colon + 1:]
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return host, port

    def hostname(self) -> str:
        return self._split_host_port()[0]

    def port(self) -> str:
        return self._split_host_port()[1]

    def escaped_path(self) -> str:
        if self.raw_path and all(not _should_escape(c, _PATH) or c in "!$&'()*+,;=:@[]%"
                                 for c in self.raw_path):
            try:
                if _unescape(self.raw_path, _PATH) == self.path:
                    return self.raw_path
            except NetParseError:
                pass
        if self.path == "*":
            return "*"
        return _escape(self.path, _PATH)

    def query(self) -> dict[str, list[str]]:
        """Go's url.ParseQuery, keeping what parses and dropping the rest."""
        values: dict[str, list[str]] = {}
        for part in self.raw_query.split("&"):
            if not part or ";" in part:
                continue
            key, _, value = part.partition("=")
            try:
                key, value = _unescape(key, _QUERY_COMPONENT), _unescape(value, _QUERY_COMPONENT)
            except NetParseError:
                continue
            values.setdefault(key, []).append(value)
        return values


def _scheme(text: str) -> tuple[str, str]:
    for i, char in enumerate(text):
        if char.isascii() and char.isalpha():
            continue
        if char.isascii() and (char.isdigit() or char in "+-."):
            if i == 0:
                return "", text
            continue
        if char == ":":
            if i == 0:
                raise NetParseError("missing protocol scheme")
            return text[:i], text[i + 1:]
        return "", text
    return "", text


def _host(scheme: str, host: str) -> str:
    open_bracket = host.rfind("[")
    if open_bracket > 0:
        raise NetParseError("invalid IP-literal")
    if open_bracket == 0:
        close = host.rfind("]")
        if close < 0:
            raise NetParseError("missing ']' in host")
        colon_port = host[close + 1:]
        if not _valid_optional_port(colon_port):
            raise NetParseError(f'invalid port "{colon_port}" after host')
        colon_port = _unescape(colon_port, _HOST)
        name = host[1:close]
        zone_at = name.find("%25")
        if zone_at >= 0:
            name = _unescape(name[:zone_at], _HOST) + _unescape(name[zone_at:], _ZONE)
        else:
            name = _unescape(name, _HOST)
        try:
            address, _ = _go_parse_addr(name)
        except NetParseError as err:
            raise NetParseError(f"invalid host: {err}") from None
        if address.bits == 32:
            raise NetParseError("invalid IP-literal")
        return f"[{name}]{colon_port}"
    colon = host.find(":")
    if colon >= 0:
        if scheme not in ("http", "https"):
            colon = host.rfind(":")
        colon_port = host[colon:]
        if not _valid_optional_port(colon_port):
            raise NetParseError(f'invalid port "{colon_port}" after host')
    return _unescape(host, _HOST)


_USERINFO_EXTRA = set("-._:~!$&'()*+,;=%@")


def _authority(scheme: str, authority: str) -> tuple[str | None, str]:
    at = authority.rfind("@")
    host = _host(scheme, authority[at + 1:])
    if at < 0:
        return None, host
    userinfo = authority[:at]
    if not all((c.isascii() and c.isalnum()) or c in _USERINFO_EXTRA for c in userinfo):
        raise NetParseError("net/url: invalid userinfo")
    user, colon, password = userinfo.partition(":")
    text = _unescape(user, _USER_PASSWORD)
    if colon:
        text += ":" + _unescape(password, _USER_PASSWORD)
    return text, host


def _go_parse(text: str, via_request: bool) -> dict[str, object]:
    """Go's url.parse: the URL's parts."""
    if any(c < " " or c == "\x7f" for c in text):
        raise NetParseError("net/url: invalid control character in URL")
    if text == "" and via_request:
        raise NetParseError("empty url")
    if text == "*":
        return {"path": "*"}
    scheme, rest = _scheme(text)
    parts: dict[str, object] = {"scheme": scheme.lower()}
    scheme = scheme.lower()
    if rest.endswith("?") and rest.count("?") == 1:
        parts["force_query"], rest = True, rest[:-1]
    else:
        rest, _, parts["raw_query"] = rest.partition("?")
    if not rest.startswith("/"):
        if scheme:
            parts["opaque"] = rest
            return parts
        if via_request:
            raise NetParseError("invalid URI for request")
        if ":" in rest.partition("/")[0]:
            raise NetParseError("first path segment in URL cannot contain colon")
    if (scheme or (not via_request and not rest.startswith("///"))) and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        rest = slash + path
        parts["user"], parts["host"] = _authority(scheme, authority)
    elif scheme and rest.startswith("/"):
        parts["omit_host"] = True
    path = _unescape(rest, _PATH)
    parts["path"] = path
    parts["raw_path"] = "" if _escape(path, _PATH) == rest else rest
    return parts


def _parse_error(text: str, err: NetParseError) -> NetParseError:
    quoted = text.replace("\\", "\\\\").replace('"', '\\"')
    return NetParseError(f'URL parse error during conversion from string: parse "{quoted}": {err}')


def is_url(text: str) -> bool:
    """``isURL(text)``: Go's url.ParseRequestURI accepts it."""
    return _parses(parse_request_uri, text)


def parse_request_uri(text: str) -> None:
    """Go's url.ParseRequestURI: raises NetParseError with its reason (without the "parse" prefix)."""
    _go_parse(text, via_request=True)


def parse_url(text: str) -> URLValue:
    """``url(text)``: accepted by url.ParseRequestURI, then split by url.Parse."""
    try:
        _go_parse(text, via_request=True)
    except NetParseError as err:
        raise _parse_error(text, err) from None
    before, hash_, fragment = text.partition("#")
    try:
        parts = _go_parse(before, via_request=False)
    except NetParseError as err:
        raise _parse_error(before, err) from None
    if hash_:
        try:
            parts["fragment"] = _unescape(fragment, _FRAGMENT)
        except NetParseError as err:
            raise _parse_error(text, err) from None
    return URLValue(**parts)  # type: ignore[arg-type]
