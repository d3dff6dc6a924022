"""formatlib's rules and messages; the expected answers are upstream's (apimachinery's validation,
kube-openapi's strfmt and Go's url.ParseRequestURI, asked through the upstream program)."""

from __future__ import annotations

import pytest

from allocator.cel import formatlib

LABEL_REGEX = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
               "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
               "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
SUBDOMAIN_REGEX = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                   "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                   "regex used for validation is "
                   "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
KEY_REGEX = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
             "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
             "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")


@pytest.mark.parametrize(("key", "text", "errors"), [
    ("dns1123Label", "my-name", []),
    ("dns1123Label", "a" * 64, ["must be no more than 63 characters"]),
    ("dns1123Label", "a" * 63 + ".", ["must be no more than 63 characters", LABEL_REGEX]),
    ("dns1123Label", "a.b", ["must not contain dots"]),
    ("dns1123Label", "", [LABEL_REGEX]),
    ("dns1123Label", "é", [LABEL_REGEX]),
    ("dns1123LabelPrefix", "a-", []),
    ("dns1123LabelPrefix", "a.-", []),  # upstream replaces the last two bytes by "a"
    ("dns1123LabelPrefix", "-", [LABEL_REGEX]),
    ("dns1123Subdomain", "a..b", [SUBDOMAIN_REGEX]),
    ("dns1123Subdomain", ("a" * 63 + ".") * 4, ["must be no more than 253 characters", SUBDOMAIN_REGEX]),
    ("qualifiedName", "a/b", []),
    ("qualifiedName", "a/", ["name part must be non-empty", f"name part {KEY_REGEX}"]),
    ("qualifiedName", "example.com/" + "a" * 64, ["name part must be no more than 63 bytes"]),
    ("qualifiedName", "a/b/c", [f"a valid label key {KEY_REGEX} with an optional DNS subdomain prefix "
                                "and '/' (e.g. 'example.com/MyName')"]),
    ("qualifiedName", "A/b", [f"prefix part {SUBDOMAIN_REGEX}"]),
    ("labelValue", "", []),
    ("labelValue", "a" * 64, ["must be no more than 63 bytes"]),
    ("uri", "/path", []),
    ("uri", "foo", ['parse "foo": invalid URI for request']),
    ("uri", "a\x01", ['parse "a\\x01": net/url: invalid control character in URL']),
    ("uri", "http://a b", ['parse "http://a b": invalid character " " in host name']),
    ("uri", "", ['parse "": empty url']),
    ("uuid", "123e4567e89b12d3a456426614174000", []),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000\n", ["does not match the UUID format"]),
    ("byte", "aGVsbA==", []),
    ("byte", "aGVsbA==\n", ["invalid base64"]),
    ("byte", "", ["invalid base64"]),
    ("date", "0000-02-29", []),
    ("date", "2021-02-29", ["invalid date"]),
    ("date", "2021-04-31", ["invalid date"]),
    ("date", "+021-01-01", ["invalid date"]),
    ("datetime", "2021-01-01t00:00:00z", []),
    ("datetime", "2021-01-01T00:00:00ZTjunk", []),  # only the first two pieces split at 't' count
    ("datetime", "2021-01-01T00:00:00x5Z", []),  # the fraction's separator is any character
    ("datetime", "2021-01-01T00:00:00\n5Z", ["invalid datetime"]),
    ("datetime", "2021-01-01T24:00:00Z", ["invalid datetime"]),
    ("datetime", "2021-01-01T00:00:00-0800", ["invalid datetime"]),
])
def test_validation_matches_upstream(key: str, text: str, errors: list[str]) -> None:
    found = formatlib.named(key)
    assert found is not None
    assert found.validate(text) == errors


def test_named_knows_exactly_the_constant_formats() -> None:
    assert formatlib.named("dns1123Label") == formatlib.NamedFormat("dns1123Label")
    assert formatlib.named("DNS1123Label") is None
    assert len(formatlib.FORMATS) == 13
