"""Conformance cases for the Kubernetes format library, run against every engine.

Every expected result is what upstream (cel-go with the Kubernetes base environment, v0.37.1)
answers: apimachinery's name validations with their messages, kube-openapi's strfmt formats,
url.ParseRequestURI's errors, and cel-go's typing of kubernetes.NamedFormat and the optional
results. Comparisons with optional.none() are left out: cel-go's estimator cannot bound them, so
our engines (which estimate every selector) refuse them.
"""

from __future__ import annotations

from case import DEFAULT_DEVICE, CelCase

D = 'device.attributes["gpu.example.com"]'
FORMAT_DEVICE = {
    **DEFAULT_DEVICE,
    "attributes": {**DEFAULT_DEVICE["attributes"], "host": {"string": "node-1.example.com"},
                   "label": {"string": "Bad_Label-"}, "stamp": {"string": "2024-02-29T23:59:59.5+01:00"}},
}
LABEL_ERROR = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
               "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
               "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def _cases(rows: list[tuple[str, object]]) -> list[CelCase]:
    return [CelCase(f"format: {expression}", expression, expect, device=FORMAT_DEVICE)  # type: ignore[arg-type]
            for expression, expect in rows]


CASES = _cases([
    # valid strings give none, invalid ones the list of upstream's messages
    ('!format.dns1123Label().validate("my-name").hasValue()', True),
    (f'format.dns1123Label().validate("My-Name").value() == ["{LABEL_ERROR}"]', True),
    ('format.dns1123Label().validate("a.b").value() == ["must not contain dots"]', True),
    ('format.dns1123Label().validate("' + "a" * 64 + '").value()[0] == "must be no more than 63 characters"',
     True),
    ('format.dns1123Subdomain().validate("a..b").value()[0].startsWith("a lowercase RFC 1123 subdomain")',
     True),
    ('!format.dns1123Subdomain().validate("apiextensions.k8s.io").hasValue()', True),
    ('format.dns1035Label().validate("1abc").value()[0].startsWith("a DNS-1035 label must")', True),
    # a prefix may end in '-'; upstream drops the character before it too, so "a.-" checks as "aa"
    ('!format.dns1123LabelPrefix().validate("my-prefix-").hasValue()', True),
    ('!format.dns1123LabelPrefix().validate("a.-").hasValue()'
     ' && format.dns1123Label().validate("a.-").hasValue()',
     True),
    ('!format.dns1035LabelPrefix().validate("x-").hasValue()', True),
    ('!format.dns1123SubdomainPrefix().validate("mysubdomain.prefix.-").hasValue()', True),
    ('!format.qualifiedName().validate("example.com/MyName").hasValue()', True),
    ('format.qualifiedName().validate("/b").value() == ["prefix part must be non-empty"]', True),
    ('format.qualifiedName().validate("a/b/c").value()[0].startsWith("a valid label key must consist")',
     True),
    ('format.qualifiedName().validate("Example.com/' + "a" * 64 + '").value().size() == 2', True),
    ('format.qualifiedName().validate("Example.com/x").value()[0].startsWith("prefix part a lowercase")',
     True),
    ('!format.labelValue().validate("").hasValue() && !format.labelValue().validate("my_value").hasValue()',
     True),
    ('format.labelValue().validate("' + "b" * 64 + '").value() == ["must be no more than 63 bytes"]', True),
    ('format.labelValue().validate("_a").value()[0].startsWith("a valid label must be an empty string")',
     True),
    # strfmt's formats and url.ParseRequestURI
    ('!format.uri().validate("http://example.com/a?b#c").hasValue()'
     ' && !format.uri().validate("/path").hasValue()',
     True),
    ('format.uri().validate("foo").value() == [\'parse "foo": invalid URI for request\']', True),
    ('format.uri().validate("http://[::1").value() == [\'parse "http://[::1": missing \\\']\\\' in host\']',
     True),
    ('format.uri().validate("").value() == [\'parse "": empty url\']', True),
    ('!format.uuid().validate("123E4567E89B12D3A456426614174000").hasValue()', True),
    ('format.uuid().validate("123e4567-e89b-12d3-a456-42661417400").value()'
     ' == ["does not match the UUID format"]',
     True),
    ('!format.byte().validate("aGVsbG8=").hasValue()'
     ' && format.byte().validate("aGVsbG8").value() == ["invalid base64"]',
     True),
    ('format.byte().validate("").hasValue()', True),
    ('!format.date().validate("2024-02-29").hasValue() && format.date().validate("2023-02-29").hasValue()',
     True),
    ('format.date().validate("2021-1-01").value() == ["invalid date"]', True),
    ('!format.datetime().validate("2021-01-01t23:59:59.123+05:30").hasValue()', True),
    ('format.datetime().validate("2021-01-01T24:00:00Z").value() == ["invalid datetime"]', True),
    ('format.datetime().validate("2021-01-01T00:00:00").hasValue()', True),
    # only the text up to a second 't' counts
    ('!format.datetime().validate("2021-01-01T00:00:00ZTjunk").hasValue()', True),
    # strings from attributes
    (f"!format.dns1123Subdomain().validate({D}.host).hasValue()", True),
    (f"format.labelValue().validate({D}.label).value().size() == 1", True),
    (f"!format.datetime().validate({D}.stamp).hasValue()", True),
    (f"format.uuid().validate({D}.index).hasValue()", "runtime_error"),
    # format.named() and format values
    ('format.named("uuid").hasValue() && !format.named("UUID").hasValue()', True),
    ('format.named("dns1123Label").value() == format.dns1123Label()', True),
    ('format.named("uuid").value() == format.byte()', False),
    ('!format.named("byte").value().validate("aGVs").hasValue()', True),
    ('format.named("nope").value().validate("x").hasValue()', "runtime_error"),
    ('format.named("nope").orValue(format.uuid()).validate("x").hasValue()', True),
    ('cel.bind(f, format.labelValue(), f.validate("a").hasValue() || f == format.uuid())', False),
    ('dyn(format.uuid()).validate("x").hasValue()', True),
    ('dyn(1).validate("x").hasValue()', "runtime_error"),
    ('[format.uuid(), format.byte()].exists(f, f.validate("aGVsbG8=").hasValue())', True),
    # typing as cel-go's
    ('format.uuid().validate(1).hasValue()', "compile_error"),
    ('format.uuid("x") == format.uuid()', "compile_error"),
    ('format.unknown()', "compile_error"),
    ('format.named(1).hasValue()', "compile_error"),
    ('format.uuid() == format.named("uuid")', "compile_error"),
    ('format.uuid() < format.byte()', "compile_error"),
    ('string(format.uuid()) == "uuid"', "compile_error"),
    ('format.uuid().validate("x").value()[0]', "compile_error"),
    ('format.uuid() == b"uuid"', "compile_error"),
])
