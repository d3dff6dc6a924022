"""The named formats of the Kubernetes CEL format library, shared by both CEL engines.

``format.dns1123Label()`` and its siblings name a validation; ``<format>.validate(text)`` answers
none when the text passes and otherwise the list of upstream's error messages. The rules are those
of apimachinery's validation (DNS names, qualified names, label values) and kube-openapi's strfmt
(uuid, base64, date, date-time), plus Go's url.ParseRequestURI for ``uri``, written to Go's
semantics: lengths are in bytes, ``$`` anchors only at the very end, dates follow time.Parse.

A format value is :class:`NamedFormat`; two formats are equal when they name the same rule.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass

from allocator.cel import netlib

TYPE_NAME = "kubernetes.NamedFormat"

# -- apimachinery's name rules ---------------------------------------------------------------------

_LABEL_RE = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_RE = _LABEL_RE + "(\\." + _LABEL_RE + ")*"
_DNS1035_RE = "[a-z]([-a-z0-9]*[a-z0-9])?"
_KEY_RE = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_VALUE_RE = "(" + _KEY_RE + ")?"

_LABEL = re.compile(_LABEL_RE)
_SUBDOMAIN = re.compile(_SUBDOMAIN_RE)
_DNS1035 = re.compile(_DNS1035_RE)
_KEY = re.compile(_KEY_RE)
_VALUE = re.compile(_VALUE_RE)

_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
              "and must start and end with an alphanumeric character")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                  "'-' or '.', and must start and end with an alphanumeric character")
_DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
                "an alphabetic character, and end with an alphanumeric character")
_KEY_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character")
_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
              "'.', and must start and end with an alphanumeric character")


def _byte_length(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def _matches(pattern: re.Pattern[str], text: str) -> bool:
    return pattern.fullmatch(text) is not None


def _regex_error(message: str, regex: str, *examples: str) -> str:
    # apimachinery's wording, with its doubled space before " or "
    if not examples:
        return f"{message} (regex used for validation is '{regex}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{regex}')"


def _too_long(limit: int, unit: str) -> str:
    # util/validation says characters, api/validate/content says bytes; both count bytes
    return f"must be no more than {limit} {unit}"


def dns1123_label(text: str) -> list[str]:
    errors = []
    if _byte_length(text) > 63:
        errors.append(_too_long(63, "characters"))
    if not _matches(_LABEL, text):
        if _matches(_SUBDOMAIN, text):
            errors.append("must not contain dots")
        else:
            errors.append(_regex_error(_LABEL_MSG, _LABEL_RE, "my-name", "123-abc"))
    return errors


def dns1123_subdomain(text: str, unit: str = "characters") -> list[str]:
    errors = []
    if _byte_length(text) > 253:
        errors.append(_too_long(253, unit))
    if not _matches(_SUBDOMAIN, text):
        errors.append(_regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_RE, "example.com"))
    return errors


def dns1035_label(text: str) -> list[str]:
    errors = []
    if _byte_length(text) > 63:
        errors.append(_too_long(63, "characters"))
    if not _matches(_DNS1035, text):
        errors.append(_regex_error(_DNS1035_MSG, _DNS1035_RE, "my-name", "abc-123"))
    return errors


def _as_prefix(text: str) -> str:
    """A generated-name prefix may end in '-'. Upstream swaps that dash for a letter but, slicing
    two bytes off instead of one, also drops the character before it ("a.-" checks as "aa")."""
    raw = text.encode("utf-8", "surrogateescape")
    if len(raw) > 1 and raw.endswith(b"-"):
        raw = raw[:-2] + b"a"
    return raw.decode("utf-8", "surrogateescape")


def qualified_name(text: str) -> list[str]:
    errors: list[str] = []
    parts = text.split("/")
    if len(parts) > 2:
        return [f"a valid label key {_regex_error(_KEY_MSG, _KEY_RE, 'MyName', 'my.name', '123-abc')}"
                " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend(f"prefix part {e}" for e in dns1123_subdomain(prefix, unit="bytes"))
    if not name:
        errors.append("name part must be non-empty")
    elif _byte_length(name) > 63:
        errors.append(f"name part {_too_long(63, 'bytes')}")
    if not _matches(_KEY, name):
        errors.append(f"name part {_regex_error(_KEY_MSG, _KEY_RE, 'MyName', 'my.name', '123-abc')}")
    return errors


def label_value(text: str) -> list[str]:
    errors = []
    if _byte_length(text) > 63:
        errors.append(_too_long(63, "bytes"))
    if not _matches(_VALUE, text):
        errors.append(_regex_error(_VALUE_MSG, _VALUE_RE, "MyValue", "my_value", "12345"))
    return errors


# -- kube-openapi's strfmt formats and url.ParseRequestURI -----------------------------------------

_UUID = re.compile("[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
_BASE64 = re.compile("(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})")
_DATE = re.compile("([0-9]{4})-([0-9]{2})-([0-9]{2})")
# "." is any character but a newline, as in Go
_TIME = re.compile("([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))")
UUID_PATTERN_LENGTH = len("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
DATETIME_PATTERN_LENGTH = len("^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")


def is_date(text: str) -> bool:
    """Go's time.Parse with layout 2006-01-02: four-digit year (0 to 9999), real month and day."""
    match = _DATE.fullmatch(text)
    if match is None:
        return False
    year, month, day = (int(group) for group in match.groups())
    # Python's calendar has no year 0; like 2000 it is a leap year in Go's proleptic calendar
    return 1 <= month <= 12 and 1 <= day <= calendar.monthrange(year or 2000, month)[1]


def _go_lower(text: str) -> str:
    # Go lowercases rune by rune (simple case mapping): U+0130 becomes a single "i"
    return "".join("i" if char == "\u0130" else char.lower() for char in text)


def is_datetime(text: str) -> bool:
    """strfmt's IsDateTime: split at every 't' (case-insensitively) and look at the first two
    pieces only: a date, then a time of day with an optional fraction and a zone."""
    if len(text.encode("utf-8", "surrogateescape")) < 4:
        return False
    pieces = _go_lower(text).split("t")
    if len(pieces) < 2 or not is_date(pieces[0]):
        return False
    match = _TIME.fullmatch(pieces[1])
    if match is None:
        return False
    return match[1] <= "23" and match[2] <= "59" and match[3] <= "59"


def go_quote(text: str) -> str:
    """Go's %q of a string (strconv.Quote)."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable() and not (0xD800 <= code <= 0xDFFF):
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def request_uri(text: str) -> list[str]:
    try:
        netlib.parse_request_uri(text)
    except netlib.NetParseError as err:
        return [f"parse {go_quote(text)}: {err}"]
    return []


def _flag(test: Callable[[str], bool], message: str) -> Callable[[str], list[str]]:
    return lambda text: [] if test(text) else [message]


# -- the named formats -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class NamedFormat:
    """A value of type kubernetes.NamedFormat: the name format.named() knows it by."""

    key: str

    def validate(self, text: str) -> list[str]:
        return FORMATS[self.key][0](text)

    @property
    def max_regex_size(self) -> int:
        return FORMATS[self.key][1]


# format.<key>() -> (validation, the regex size upstream's run-time cost assumes)
FORMATS: dict[str, tuple[Callable[[str], list[str]], int]] = {
    "dns1123Label": (dns1123_label, 30),
    "dns1123Subdomain": (dns1123_subdomain, 60),
    "dns1035Label": (dns1035_label, 30),
    "qualifiedName": (qualified_name, 60),
    "dns1123LabelPrefix": (lambda text: dns1123_label(_as_prefix(text)), 30),
    "dns1123SubdomainPrefix": (lambda text: dns1123_subdomain(_as_prefix(text)), 60),
    "dns1035LabelPrefix": (lambda text: dns1035_label(_as_prefix(text)), 30),
    "labelValue": (label_value, 40),
    "uri": (request_uri, 1103),
    "uuid": (_flag(lambda t: _UUID.fullmatch(t) is not None, "does not match the UUID format"),
             UUID_PATTERN_LENGTH),
    "byte": (_flag(lambda t: _BASE64.fullmatch(t) is not None, "invalid base64"), 84),
    "date": (_flag(is_date, "invalid date"), DATETIME_PATTERN_LENGTH),
    "datetime": (_flag(is_datetime, "invalid datetime"), DATETIME_PATTERN_LENGTH),
}


def named(name: str) -> NamedFormat | None:
    """``format.named(name)``: the format, or None (optional.none()) for an unknown name."""
    return NamedFormat(name) if name in FORMATS else None
