"""Hypothesis strategies for random DRA CEL selectors over the Kubernetes libraries, and random devices
to evaluate them on.

Expressions are built by type (int, string, bool, quantity, semver, lists), so most compile; a
few deliberately mix types or read attributes a device may lack, so compile and runtime errors are
exercised too. Everything uses the device's own domain "dra.example.com" (D and C below).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

Obj = dict[str, Any]
DRIVER = "dra.example.com"
D = 'device.attributes["dra.example.com"]'
C = 'device.capacity["dra.example.com"]'
MAX_DEPTH = 3


@st.composite
def devices(draw: st.DrawFn, lists: bool) -> Obj:
    attributes: Obj = {}
    if draw(st.booleans()):
        attributes["idx"] = {"int": draw(st.integers(-3, 5))}
    if draw(st.booleans()):
        attributes["model"] = {"string": draw(st.sampled_from(["a100", "H100", "x-y", ""]))}
    if draw(st.booleans()):
        attributes["ver"] = {"version": draw(st.sampled_from(["1.2.3", "2.0.0-rc.1", "0.9.0", "1.10.0"]))}
    if draw(st.booleans()):
        attributes["ok"] = {"bool": draw(st.booleans())}
    if draw(st.booleans()):
        attributes["addr"] = {"string": draw(st.one_of(ip_texts(), cidr_texts(), url_texts()))}
    if draw(st.booleans()):
        attributes["name"] = {"string": draw(format_texts())}
    if draw(st.integers(0, 3)) == 0:
        attributes["other.example.com/zone"] = {"string": draw(st.sampled_from(["z1", "z2"]))}
    if lists and draw(st.booleans()):
        attributes["ids"] = {"ints": draw(st.lists(st.integers(0, 4), max_size=3))}
    if lists and draw(st.booleans()):
        attributes["tags"] = {"strings": draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3))}
    capacity: Obj = {}
    if draw(st.booleans()):
        capacity["memory"] = {"value": draw(st.sampled_from(["80Gi", "1500m", "4", "0"]))}
    if draw(st.booleans()):
        capacity["cores"] = {"value": draw(st.sampled_from(["8", "2k"]))}
    device: Obj = {"driver": DRIVER, "attributes": attributes, "capacity": capacity}
    if draw(st.booleans()):
        device["allowMultipleAllocations"] = draw(st.booleans())
    return device


# -- IP addresses, CIDRs and URLs as text: valid and invalid, for the Go-rule parsers -------------


@st.composite
def ip_texts(draw: st.DrawFn) -> str:
    shape = draw(st.integers(0, 6))
    octet = st.sampled_from(["0", "1", "10", "127", "169", "254", "255", "256", "01", "224", "192"])
    group = st.sampled_from(["0", "1", "ff", "FFFF", "fe80", "ff02", "0db8", "2001", "12345", "", "g"])
    if shape <= 1:
        count = draw(st.sampled_from([4, 4, 4, 3, 5]))
        return ".".join(draw(octet) for _ in range(count))
    if shape <= 3:
        groups = [draw(group) for _ in range(draw(st.integers(1, 9)))]
        if draw(st.booleans()):
            groups.insert(draw(st.integers(0, len(groups))), "")  # a :: somewhere
        text = ":".join(groups)
        if draw(st.integers(0, 4)) == 0:
            text += ":" + ".".join(draw(octet) for _ in range(4))
        return text
    if shape == 4:
        return draw(st.sampled_from(["::", "::1", "::ffff:1.2.3.4", "::ffff:0102:0304", "fe80::1%eth0",
                                     "1::", "::1.2.3.4", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "%x"]))
    if shape == 5:
        return draw(st.sampled_from(["", " 1.2.3.4", "1.2.3.4 ", "localhost", "1.2.3.4/8", "[::1]"]))
    return draw(st.sampled_from(["10.0.0.1", "192.168.1.1", "2001:db8::1", "169.254.1.1", "224.0.0.1",
                                 "255.255.255.255", "0.0.0.0", "127.0.0.1", "ff02::1", "fe80::"]))


@st.composite
def cidr_texts(draw: st.DrawFn) -> str:
    bits = draw(st.sampled_from(["0", "8", "16", "24", "32", "33", "64", "128", "129", "08", "+8", "", "x"]))
    return f"{draw(ip_texts())}/{bits}" if draw(st.integers(0, 9)) else draw(ip_texts())


@st.composite
def url_texts(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "", "1x://", "mailto:", "s:",
                                   "//"]))
    user = draw(st.sampled_from(["", "", "u@", "u:p@", "a b@", "%41@"]))
    host = draw(st.sampled_from(["example.com", "a.b", "10.0.0.1", "[::1]", "[1.2.3.4]", "[fe80::1%25e]",
                                 "a b", "%41", "%2e", "", "a:80", "a:8x", "a:b:80", "[::1]:443", "é.com",
                                 "[::1"]))
    path = draw(st.sampled_from(["", "/", "/a/b", "/a%20b", "/a%2Fb", "/a b", "/%zz", "/é", "x", "*"]))
    query = draw(st.sampled_from(["", "?", "?a=1&b=2&a=3", "?a;b=1", "?%zz=1&c=2", "?a+b=c%20d", "?=x&k"]))
    fragment = draw(st.sampled_from(["", "", "#f", "#a%20b", "#%zz", "#a#b"]))
    return scheme + user + host + path + query + fragment


def _text(draw: st.DrawFn, texts: Any, depth: int) -> str:
    """A string expression holding net text: a literal, or the device's "addr" attribute."""
    if draw(st.integers(0, 4)) == 0:
        return f"{D}.addr" if draw(st.booleans()) else f'{D}.?addr.orValue("10.0.0.1")'
    return '"' + draw(texts) + '"'


def _net(draw: st.DrawFn, kind: str, depth: int) -> str:
    """An expression of kind ip, cidr or url."""
    if kind == "ip":
        if depth < MAX_DEPTH and draw(st.integers(0, 3)) == 0:
            return f"{_net(draw, 'cidr', depth + 1)}.ip()"
        return f"ip({_text(draw, ip_texts(), depth)})"
    if kind == "cidr":
        if depth < MAX_DEPTH and draw(st.integers(0, 3)) == 0:
            return f"{_net(draw, 'cidr', depth + 1)}.masked()"
        return f"cidr({_text(draw, cidr_texts(), depth)})"
    return f"url({_text(draw, url_texts(), depth)})"


def _net_bool(draw: st.DrawFn, depth: int) -> str:
    shape = draw(st.integers(0, 8))
    if shape == 0:
        test = draw(st.sampled_from(["isIP", "ip.isCanonical", "isCIDR", "isURL"]))
        texts = {"isIP": ip_texts(), "ip.isCanonical": ip_texts(), "isCIDR": cidr_texts(),
                 "isURL": url_texts()}
        return f"{test}({_text(draw, texts[test], depth)})"
    if shape == 1:
        method = draw(st.sampled_from(["isUnspecified", "isLoopback", "isLinkLocalMulticast",
                                       "isLinkLocalUnicast", "isGlobalUnicast"]))
        return f"{_net(draw, 'ip', depth + 1)}.{method}()"
    if shape == 2:
        other = _net(draw, "ip", depth + 1) if draw(st.booleans()) else _text(draw, ip_texts(), depth)
        return f"{_net(draw, 'cidr', depth + 1)}.containsIP({other})"
    if shape == 3:
        other = _net(draw, "cidr", depth + 1) if draw(st.booleans()) else _text(draw, cidr_texts(), depth)
        return f"{_net(draw, 'cidr', depth + 1)}.containsCIDR({other})"
    if shape == 4:
        kind = draw(st.sampled_from(["ip", "cidr", "url"]))
        return f"{_net(draw, kind, depth + 1)} == {_net(draw, kind, depth + 1)}"
    if shape == 5:
        key = draw(st.sampled_from(["a", "b", "k", "", "a b"]))
        return f'"{key}" in {_net(draw, "url", depth + 1)}.getQuery()'
    if shape == 6:
        return f"{_net(draw, 'url', depth + 1)}.getQuery() == {{'a': ['1', '3'], 'b': ['2']}}"
    if shape == 7:  # mixes types on purpose
        kinds = st.sampled_from(["ip", "cidr", "url"])
        return f"{_net(draw, draw(kinds), depth + 1)} == {_net(draw, draw(kinds), depth + 1)}"
    return f"{_net(draw, 'cidr', depth + 1)}.containsIP({expr(draw, 'string', depth + 1)})"


def _net_string(draw: st.DrawFn, depth: int) -> str:
    if draw(st.booleans()):
        return f"string({_net(draw, draw(st.sampled_from(['ip', 'cidr'])), depth + 1)})"
    getter = draw(st.sampled_from(["getScheme", "getHost", "getHostname", "getPort", "getEscapedPath"]))
    return f"{_net(draw, 'url', depth + 1)}.{getter}()"


def _net_int(draw: st.DrawFn, depth: int) -> str:
    shape = draw(st.integers(0, 2))
    if shape == 0:
        return f"{_net(draw, 'ip', depth + 1)}.family()"
    if shape == 1:
        return f"{_net(draw, 'cidr', depth + 1)}.prefixLength()"
    return f"size({_net(draw, 'url', depth + 1)}.getQuery())"


# -- durations and timestamps: Go's parsing of literals (checked at compile time) and of strings --

DURATION_TEXTS = ["1h", "90m", "1.5s", "-1.5s", "1h30m", "0", "-0", "0s", "1µs", "2us", "3ns",
                  "1.000000001s", ".5s", "5.s", "+3s", "1d", "", "1", "s", "1.5", "9223372036854775807ns",
                  "2562048h", "1h-1m"]
TIMESTAMP_TEXTS = ["2020-01-01T00:00:00Z", "2020-01-01T00:00:00.5+01:00", "2021-06-30T23:59:59.123456789Z",
                   "2020-02-29T12:00:00-08:00", "1970-01-01T00:00:00Z", "0001-01-01T00:00:00Z",
                   "9999-12-31T23:59:59Z", "2020-01-01T00:00:00,5Z", "2020-01-01", "2020-01-01t00:00:00Z",
                   "2020-01-01T00:00:00z", "2020-02-30T00:00:00Z", "0000-01-01T00:00:00Z",
                   "2020-01-01T00:00:00+24:00", "2020-01-01T24:00:00Z"]
ZONES = ["UTC", "America/New_York", "Asia/Kolkata", "+05:30", "-0:30", "05:30", "-08:00", "Nowhere/City",
         "+1:60"]


def _time(draw: st.DrawFn, kind: str, depth: int) -> str:
    """An expression of kind duration or timestamp."""
    deeper = depth < MAX_DEPTH and draw(st.integers(0, 3)) == 0
    if kind == "duration":
        if deeper:
            if draw(st.booleans()):
                return f"({_time(draw, 'timestamp', depth + 1)} - {_time(draw, 'timestamp', depth + 1)})"
            op = draw(st.sampled_from(["+", "-"]))
            return f"({_time(draw, 'duration', depth + 1)} {op} {_time(draw, 'duration', depth + 1)})"
        if draw(st.integers(0, 5)) == 0:
            return f"duration({expr(draw, 'string', depth + 1)})"
        return f'duration("{draw(st.sampled_from(DURATION_TEXTS))}")'
    if deeper:
        op = draw(st.sampled_from(["+", "-"]))
        return f"({_time(draw, 'timestamp', depth + 1)} {op} {_time(draw, 'duration', depth + 1)})"
    shape = draw(st.integers(0, 5))
    if shape == 0:
        return f"timestamp({expr(draw, 'int', depth + 1)})"
    if shape == 1:
        return f"timestamp({draw(st.sampled_from(['0', '1577836800', '-62135596800', '253402300800']))})"
    return f'timestamp("{draw(st.sampled_from(TIMESTAMP_TEXTS))}")'


def _time_int(draw: st.DrawFn, depth: int) -> str:
    if draw(st.integers(0, 3)) == 0:
        return f"int({_time(draw, draw(st.sampled_from(['duration', 'timestamp'])), depth + 1)})"
    if draw(st.booleans()):
        getter = draw(st.sampled_from(["getHours", "getMinutes", "getSeconds", "getMilliseconds"]))
        return f"{_time(draw, 'duration', depth + 1)}.{getter}()"
    getter = draw(st.sampled_from(["getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate",
                                   "getDayOfWeek", "getHours", "getMinutes", "getSeconds",
                                   "getMilliseconds"]))
    zone = f'"{draw(st.sampled_from(ZONES))}"' if draw(st.booleans()) else ""
    return f"{_time(draw, 'timestamp', depth + 1)}.{getter}({zone})"


def _time_bool(draw: st.DrawFn, depth: int) -> str:
    shape = draw(st.integers(0, 3))
    if shape == 3:  # type values: no cost bound for cel-go, so refused as new selectors
        kind = draw(st.sampled_from(["int", "string", "bool", "duration", "timestamp"]))
        name = draw(st.sampled_from(["int", "string", "bool", "google.protobuf.Duration", "type(1)"]))
        timed = kind in ("duration", "timestamp")
        value = _time(draw, kind, depth + 1) if timed else expr(draw, kind, depth + 1)
        return f"type({value}) == {name}"
    kind = draw(st.sampled_from(["duration", "timestamp"]))
    op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
    return f"{_time(draw, kind, depth + 1)} {op} {_time(draw, kind, depth + 1)}"


# -- the format library: valid and invalid names, URIs, UUIDs, base64, dates --------------------

FORMAT_NAMES = ["dns1123Label", "dns1123Subdomain", "dns1035Label", "qualifiedName", "dns1123LabelPrefix",
                "dns1123SubdomainPrefix", "dns1035LabelPrefix", "labelValue", "uri", "uuid", "byte", "date",
                "datetime"]


@st.composite
def format_texts(draw: st.DrawFn) -> str:
    shape = draw(st.integers(0, 5))
    if shape == 0:  # names: labels, subdomains, qualified names, prefixes
        part = st.sampled_from(["a", "my-name", "A", "1abc", "a_b", "-a", "a-", "x.y", "", "é", "a" * 63,
                                "b" * 64, "Ex.com", "a.-", "-", "ab.c-"])
        return draw(st.sampled_from(["", "/", "."])).join(draw(st.lists(part, min_size=1, max_size=3)))
    if shape == 1:
        return draw(url_texts())
    if shape == 2:
        hexes = draw(st.sampled_from(["123e4567", "123E4567", "12g45678", "1234567"]))
        dash = draw(st.sampled_from(["-", "", "_"]))
        last = draw(st.sampled_from(["426614174000", "42661417400"]))
        return dash.join([hexes, "e89b", "12d3", "a456", last])
    if shape == 3:
        return draw(st.sampled_from(["aGVsbG8=", "aGVsbG8", "aGVsbA==", "aGVs", "", "a+/b", "aGVs\n", "====",
                                     "ab=c"]))
    date = draw(st.sampled_from(["2024-02-29", "2023-02-29", "2021-04-31", "0000-01-01", "2021-1-01",
                                 "9999-12-31", "2021-13-01", "+021-01-01"]))
    if shape == 4:
        return date
    clock = draw(st.sampled_from(["00:00:00", "23:59:59", "24:00:00", "12:60:00", "1:00:00", "12:00:00.123"]))
    zone = draw(st.sampled_from(["Z", "z", "+05:30", "-0800", "", "Zt", "ZTx"]))
    return date + draw(st.sampled_from(["T", "t", " ", "TT"])) + clock + zone


def _format_text(draw: st.DrawFn, depth: int) -> str:
    """A string expression to validate: a literal, the device's "name" attribute, or any string."""
    choice = draw(st.integers(0, 6))
    if choice == 0:
        return f"{D}.name" if draw(st.booleans()) else f'{D}.?name.orValue("x")'
    if choice == 1 and depth < MAX_DEPTH:
        return expr(draw, "string", depth + 1)
    return '"' + draw(format_texts()) + '"'


def _format(draw: st.DrawFn) -> str:
    """A format value: format.<name>(), or (mostly known) format.named(...).value()."""
    if draw(st.integers(0, 3)):
        return f"format.{draw(st.sampled_from(FORMAT_NAMES))}()"
    name = draw(st.sampled_from([*FORMAT_NAMES, "UUID", "dns1123label", ""]))
    return f'format.named("{name}").value()'


def _format_bool(draw: st.DrawFn, depth: int) -> str:
    shape = draw(st.integers(0, 6))
    validated = f"{_format(draw)}.validate({_format_text(draw, depth)})"
    if shape <= 1:
        return f"{validated}.hasValue()" if shape else f"!{validated}.hasValue()"
    if shape == 2:
        return f"{validated}.orValue([]).size() == {draw(st.integers(0, 2))}"
    if shape == 3:
        start = draw(st.sampled_from(["a lowercase", "must", "parse", "invalid", "name part", "prefix part"]))
        return f'{validated}.value()[0].startsWith("{start}")'
    if shape == 4:
        name = draw(st.sampled_from([*FORMAT_NAMES, "nope", "URI"]))
        return f'format.named("{name}").hasValue()'
    if shape == 5:
        return f"{_format(draw)} {draw(st.sampled_from(['==', '==', '!=']))} {_format(draw)}"
    word = draw(st.sampled_from(["must", "ok", "63"]))
    return f'{validated}.orValue(["ok"]).exists(e, e.contains("{word}"))'


def _bin(draw: st.DrawFn, kind: str, depth: int, ops: list[str]) -> str:
    return f"({expr(draw, kind, depth + 1)} {draw(st.sampled_from(ops))} {expr(draw, kind, depth + 1)})"


def _conditional(draw: st.DrawFn, kind: str, depth: int) -> str:
    condition = expr(draw, "bool", depth + 1)
    return f"({condition} ? {expr(draw, kind, depth + 1)} : {expr(draw, kind, depth + 1)})"


def _optional_int(draw: st.DrawFn, depth: int) -> str:
    """An int through the optional library: value() of an absent attribute fails at run time."""
    shape = draw(st.integers(0, 4))
    if shape == 0:
        return f"{D}.?idx.value()"
    if shape == 1:
        return f"optional.none().orValue({expr(draw, 'int', depth + 1)})"
    if shape == 2:
        return f"{D}.?idx.or(optional.of({expr(draw, 'int', depth + 1)})).value()"
    if shape == 3:
        return f"{expr(draw, 'ints', depth + 1)}[?{expr(draw, 'int', depth + 1)}].orValue(-5)"
    return f"optional.ofNonZeroValue({expr(draw, 'int', depth + 1)}).orValue(5)"


def _list_extension(draw: st.DrawFn, kind: str, depth: int) -> str:
    """A list of ``kind`` (ints or strings) through cel-go's lists extension or transformList; some
    calls fail at run time (slice bounds, lists.range(-1)) or do not compile (flatten of a typed
    flat list, sortBy on a key of no ordered type)."""
    element = "int" if kind == "ints" else "string"
    target = expr(draw, kind, depth + 1)
    shape = draw(st.integers(0, 7))
    if shape == 0:
        return f"{target}.{draw(st.sampled_from(['sort', 'distinct', 'reverse']))}()"
    if shape == 1:
        bounds = draw(st.sampled_from(["0, 1", "1, 2", "0, 0", "2, 1", "-1, 1", "0, 5"]))
        if draw(st.booleans()):
            bounds = f"0, {expr(draw, 'int', depth + 1)}"
        return f"{target}.slice({bounds})"
    if shape == 2:
        key = draw(st.sampled_from(
            ["-x", "x % 3", "1", "[x]"] if kind == "ints" else ["x", "size(x)", "x.upperAscii()", "[x]"]))
        return f"{target}.sortBy(x, {key})"
    if shape == 3:
        other = expr(draw, kind, depth + 1)
        form = draw(st.sampled_from(["[{}, {}].flatten()", "[{}, {}].flatten(1)", "{}.flatten()",
                                     "dyn([{}, {}]).flatten(2)"]))
        return form.format(target, other) if form.count("{}") == 2 else form.format(target)
    if shape == 4:
        transform = "v * i + 1" if kind == "ints" else 'v + "-" + string(i)'
        if draw(st.booleans()):
            return f"{target}.transformList(i, v, {transform})"
        return f"{target}.transformList(i, v, i % 2 == 0, {transform})"
    if shape == 5 and kind == "ints":
        return f"lists.range({expr(draw, 'int', depth + 1)})"
    if shape == 6:  # values of a map built by a transform, in key order of a sort
        built = _map_transform(draw, depth)
        return f"{built}.transformList(k, v, {'v' if kind == 'ints' else 'string(k)'}).sort()"
    return f"[{expr(draw, element, depth + 1)}, {expr(draw, element, depth + 1)}].sort()"


def _map_transform(draw: st.DrawFn, depth: int) -> str:
    """A map(int, int) through transformMap or transformMapEntry (duplicate keys fail at run time)."""
    source = expr(draw, "ints", depth + 1)
    return draw(st.sampled_from([
        f"{source}.transformMap(i, v, v + i)",
        f"{source}.transformMap(i, v, v > 1, v)",
        f"{source}.transformMapEntry(i, v, {{v: i}})",
        f"{source}.transformMapEntry(i, v, i < 2, {{v % 3: i}})",
    ]))


def _map_transform_size(draw: st.DrawFn, depth: int) -> str:
    built = _map_transform(draw, depth)
    return draw(st.sampled_from([f"size({built})", f"{built}.transformList(k, v, k + v).sum()"]))


# -- what cel-go computes when the program is created: conversions of constants (Go's strconv rules),
# constant regular expressions, map literals of constants; a failure is a compile error wherever it sits

INT_TEXTS = ["7", "-3", "+2", "0", " 1", "1 ", "1_0", "0x10", "9223372036854775807", "9223372036854775808",
             "", "1.5"]
DOUBLE_TEXTS = ["1.5", "-0.0", "1e6", "1_0.5", "0x1p-2", "inf", "-Infinity", "NaN", "+nan", "1e400", " 1",
                "1__0", ".5", "5.", "1e", "0x1"]
BOOL_TEXTS = ["true", "True", "TRUE", "t", "T", "1", "false", "F", "0", "yes", "tRUE", ""]
DOUBLES = ["1.5", "-2.7", "1e19", "-9.3e18", "0.5", "1e6", "123456789.125", "-0.0", "1e-7", 'double("NaN")',
           'double("inf")']
PATTERNS = ['"a+"', '"^[a-z]+[0-9]*$"', '"("', '"[a-"', '"a**"', '"\\\\C"', '"x{2}{3}"', '""']


def _pick(draw: st.DrawFn, choices: list[str]) -> str:
    return draw(st.sampled_from(choices))


def _constant(draw: st.DrawFn, kind: str, depth: int) -> str:
    """A ``kind`` (int, string or bool) computed by conversions, mostly of constants."""
    shape = draw(st.integers(0, 9))
    if kind == "int":
        if shape == 0:
            return f"int(string({expr(draw, 'int', depth + 1)}))"
        if shape == 1:
            return f"int({D}.model)"
        return _pick(draw, [
            f'int("{_pick(draw, INT_TEXTS)}")', f"int({_pick(draw, DOUBLES)})",
            f'int(uint("{_pick(draw, INT_TEXTS)}"))', f'int(dyn("{_pick(draw, INT_TEXTS)}"))',
            f"int(dyn({_pick(draw, DOUBLES)}))", f'int(double("{_pick(draw, DOUBLE_TEXTS)}"))',
            "int(dyn([1]))",
            f"int(timestamp({_pick(draw, ['0', '253402300799', '-62135596800'])}))",
        ])
    if kind == "string":
        if shape == 0:
            return f"string(dyn({expr(draw, 'string', depth + 1)}))"
        return _pick(draw, [
            f"string({_pick(draw, DOUBLES)})", f"string(dyn({_pick(draw, DOUBLES)}))", 'string(bytes("é"))',
            'string(b"\\xff")', f'string(bool("{_pick(draw, BOOL_TEXTS)}"))',
            f'string(uint("{_pick(draw, INT_TEXTS)}"))', "string(dyn(int))", "string(type(1))",
        ])
    assert kind == "bool", kind
    return _pick(draw, [
        f'bool("{_pick(draw, BOOL_TEXTS)}")', f'bool(dyn("{_pick(draw, BOOL_TEXTS)}"))',
        f'cel.bind(s, "{_pick(draw, BOOL_TEXTS)}", bool(s))',
        f'double("{_pick(draw, DOUBLE_TEXTS)}") {_pick(draw, ["<", ">=", "!="])} 1.0',
        f'cel.bind(s, "{_pick(draw, DOUBLE_TEXTS)}", double(s)) > 0.0',
        f'uint("{_pick(draw, INT_TEXTS)}") > {_pick(draw, ["1u", "0u"])}',
        f"uint({_pick(draw, DOUBLES)}) >= 0u", f'cel.bind(s, "{_pick(draw, INT_TEXTS)}", int(s)) > 1',
    ])


def _pattern_use(draw: st.DrawFn, depth: int) -> str:
    """matches(), find() or findAll() with a pattern that is a literal, a constant conversion of one,
    or known only at run time."""
    pattern = _pick(draw, PATTERNS)
    pattern = _pick(draw, [pattern, f"string({pattern})", f"dyn({pattern})", f"{D}.model",
                           f'{D}.?model.orValue("(")'])
    text = expr(draw, "string", depth + 1)
    return _pick(draw, [
        f"{text}.matches({pattern})", f'{text}.find({pattern}) == ""',
        f"{text}.findAll({pattern}).size() > 0", f"{text}.findAll({pattern}, 1).size() == 1",
        f"matches({text}, {pattern})",
    ])


def _repeated_keys(draw: st.DrawFn, depth: int) -> str:
    """A map literal that repeats a key (the later entry wins), constant or not."""
    key = _pick(draw, ["1", '"a"', f"{D}.?idx.orValue(1)"])
    first, second = expr(draw, "int", depth + 1), expr(draw, "int", depth + 1)
    built = f"{{{key}: {first}, {key}: {second}}}"
    return _pick(draw, [f"{built}.size() == 1", f"{built}[{key}] == {second}", f"dyn({built}).size() == 1"])


# Predicates of a filter over an int list: on an empty literal each binds its element type through
# the first overload that fits (x > 0 an int, -x a double, size(x) bytes, x > dyn a bool), and the
# result's type then decides what compiles around it.
INT_PREDICATES = ["x > {int}", "x == {int}", "x >= 0.5", "-x < 0", "x % 2 == 0", "x in [1, 2]",
                  f"x == {D}.idx", f"x > {D}.idx", "size(x) > 0", 'string(x) == "1"', "x == x",
                  "[x, 1].size() > 1"]
STRING_PREDICATES = ['s.startsWith("a")', 's == "b"', "size(s) > 1", 's > "a"', f"s == {D}.model",
                     's.matches("^[ab]")']


def expr(draw: st.DrawFn, kind: str, depth: int = 0) -> str:
    """A random expression of type ``kind``: int, string, bool, quantity, version, ints, strings."""
    leaf = depth >= MAX_DEPTH or draw(st.integers(0, 2)) == 0
    if kind == "int":
        if leaf:
            return draw(st.sampled_from(["0", "1", "2", "-1", "7", f"{D}.idx", f"{D}.?idx.orValue(3)"]))
        shape = draw(st.integers(0, 13))
        if shape == 13:
            return _constant(draw, "int", depth)
        if shape == 12:
            return _time_int(draw, depth)
        if shape == 11:
            return _net_int(draw, depth)
        if shape == 0:
            return _bin(draw, "int", depth, ["+", "-", "*", "/", "%"])
        if shape == 10:
            return _map_transform_size(draw, depth)
        if shape == 1:
            return f"size({expr(draw, 'string', depth + 1)})"
        if shape == 2:
            return f"{expr(draw, 'string', depth + 1)}.indexOf({expr(draw, 'string', depth + 1)})"
        if shape == 3:  # sign is a global function in cel-go; the member form does not compile
            form = draw(st.sampled_from(["{}.asInteger()", "{}.asInteger()", "sign({})", "{}.sign()"]))
            return form.format(expr(draw, "quantity", depth + 1))
        if shape == 4:
            return (
                f"{expr(draw, 'version', depth + 1)}.{draw(st.sampled_from(['major', 'minor', 'patch']))}()"
            )
        if shape == 5:
            return f"{expr(draw, 'ints', depth + 1)}.{draw(st.sampled_from(['sum', 'min', 'max']))}()"
        if shape == 6:
            return f"cel.bind(x, {expr(draw, 'int', depth + 1)}, x * x + 1)"
        if shape == 7:
            return f"size({expr(draw, 'ints', depth + 1)})"
        if shape == 8:
            return _optional_int(draw, depth)
        return f"{expr(draw, 'quantity', depth + 1)}.compareTo({expr(draw, 'quantity', depth + 1)})"
    if kind == "string":
        if leaf:
            return draw(
                st.sampled_from(
                    [
                        '"a100"',
                        '"AbC"',
                        '""',
                        '"x-y"',
                        "device.driver",
                        f"{D}.model",
                        f'{D}.?model.orValue("none")',
                        'device.attributes["other.example.com"].zone',
                    ]
                )
            )
        shape = draw(st.integers(0, 10))
        if shape == 10:
            return _constant(draw, "string", depth)
        if shape == 9:
            validated = f"{_format(draw)}.validate({_format_text(draw, depth)})"
            return f'{validated}.orValue(["ok"])[0]'
        if shape == 8:
            return f"string({_time(draw, draw(st.sampled_from(['duration', 'timestamp'])), depth + 1)})"
        if shape == 7:
            return _net_string(draw, depth)
        if shape == 0:
            method = draw(st.sampled_from(["lowerAscii", "upperAscii", "trim"]))
            return f"{expr(draw, 'string', depth + 1)}.{method}()"
        if shape == 1:
            return f"({expr(draw, 'string', depth + 1)} + {expr(draw, 'string', depth + 1)})"
        if shape == 2:
            return f"{expr(draw, 'string', depth + 1)}.substring({draw(st.sampled_from(['0', '1', '3']))})"
        if shape == 3:
            return f'{expr(draw, "string", depth + 1)}.replace("a", {expr(draw, "string", depth + 1)})'
        if shape == 4:
            return f'{expr(draw, "strings", depth + 1)}.join("-")'
        if shape == 5:
            return f"string({expr(draw, 'int', depth + 1)})"
        return _conditional(draw, "string", depth)
    if kind == "quantity":
        if leaf:
            return draw(
                st.sampled_from(
                    [
                        'quantity("1Gi")',
                        'quantity("500m")',
                        'quantity("4")',
                        f"{C}.memory",
                        f"{C}.cores",
                        f'{C}.?memory.orValue(quantity("1"))',
                    ]
                )
            )
        op = draw(st.sampled_from(["add", "sub"]))
        other = expr(draw, draw(st.sampled_from(["quantity", "int"])), depth + 1)
        return f"{expr(draw, 'quantity', depth + 1)}.{op}({other})"
    if kind == "version":
        if leaf or draw(st.booleans()):
            return draw(
                st.sampled_from(
                    [
                        'semver("1.2.3")',
                        'semver("2.0.0-rc.1")',
                        'semver("v1.2", true)',
                        f"{D}.ver",
                        'semver("1.02.3")',
                    ]
                )
            )
        return _conditional(draw, "version", depth)
    if kind == "ints":
        if leaf:
            return draw(st.sampled_from(["[]", "[1, 2, 3]", "[3, 1]", f"{D}.ids"]))
        shape = draw(st.integers(0, 4))
        if shape == 4:
            return _list_extension(draw, "ints", depth)
        if shape == 0:
            predicate = draw(st.sampled_from(INT_PREDICATES)).format(int=expr(draw, "int", depth + 1))
            return f"{expr(draw, 'ints', depth + 1)}.filter(x, {predicate})"
        if shape == 1:
            return f"{expr(draw, 'ints', depth + 1)}.map(x, x * 2)"
        if shape == 2:
            return f"({expr(draw, 'ints', depth + 1)} + {expr(draw, 'ints', depth + 1)})"
        return f"[{expr(draw, 'int', depth + 1)}, {expr(draw, 'int', depth + 1)}]"
    if kind == "strings":
        if leaf:
            return draw(st.sampled_from(['["a", "b"]', "[]", f"{D}.tags", '"a,b,c".split(",")']))
        choice = draw(st.integers(0, 3))
        if choice <= 1:
            return _list_extension(draw, "strings", depth)
        if choice == 2:
            return f"{expr(draw, 'strings', depth + 1)}.filter(s, {draw(st.sampled_from(STRING_PREDICATES))})"
        return f'{expr(draw, "string", depth + 1)}.split("-")'
    assert kind == "bool", kind
    if leaf:
        return draw(
            st.sampled_from(
                [
                    "true",
                    "false",
                    f"{D}.ok",
                    f"has({D}.idx)",
                    f'"model" in {D}',
                    "device.allowMultipleAllocations",
                    f"{D}.?ok.orValue(true)",
                    f"{D}.?idx.hasValue()",
                ]
            )
        )
    shape = draw(st.integers(0, 22))
    if shape == 22:  # lists of lists: element types must agree (HomogeneousAggregateLiterals)
        kind = draw(st.sampled_from(["ints", "strings"]))
        first, second = expr(draw, kind, depth + 1), expr(draw, kind, depth + 1)
        return _pick(draw, [f"[{first}, {second}].size() == 2", f"{first} in [{second}]",
                            f"[{first}] == [{second}, {first}]", f"[[], {first}, {second}].size() > 1"])
    if shape == 21:
        return _repeated_keys(draw, depth)
    if shape == 20:
        return _pattern_use(draw, depth)
    if shape == 19:
        return _constant(draw, "bool", depth)
    if shape == 18:
        return _format_bool(draw, depth)
    if shape == 17:
        return _time_bool(draw, depth)
    if shape >= 15:
        return _net_bool(draw, depth)
    if shape == 0:
        return _bin(draw, "int", depth, ["==", "!=", "<", "<=", ">", ">="])
    if shape == 14:  # two-variable quantifiers: index (or key) and value
        macro = draw(st.sampled_from(["exists", "all", "existsOne", "exists_one"]))
        kind = draw(st.sampled_from(["ints", "strings"]))
        predicate = draw(st.sampled_from(["i < 2", "i == v", "v == v", "size(string(v)) > i", "v > i"]))
        return f"{expr(draw, kind, depth + 1)}.{macro}(i, v, {predicate})"
    if shape == 1:
        return _bin(draw, "string", depth, ["==", "!=", "<", ">"])
    if shape == 2:
        method = draw(st.sampled_from(["startsWith", "endsWith", "contains", "matches"]))
        argument = draw(st.sampled_from(['"a"', '"^[a-z]+[0-9]*$"', '"("', '"H"']))
        return f"{expr(draw, 'string', depth + 1)}.{method}({argument})"
    if shape == 3:
        method = draw(st.sampled_from(["isGreaterThan", "isLessThan"]))
        return f"{expr(draw, 'quantity', depth + 1)}.{method}({expr(draw, 'quantity', depth + 1)})"
    if shape == 4:
        method = draw(st.sampled_from(["isGreaterThan", "isLessThan"]))
        return f"{expr(draw, 'version', depth + 1)}.{method}({expr(draw, 'version', depth + 1)})"
    if shape == 5:
        return _bin(draw, "bool", depth, ["&&", "||", "==", "!="])
    if shape == 6:
        return f"!{expr(draw, 'bool', depth + 1)}"
    if shape == 7:
        macro = draw(st.sampled_from(["exists", "all", "exists_one"]))
        return f"{expr(draw, 'ints', depth + 1)}.{macro}(y, y >= {expr(draw, 'int', depth + 1)})"
    if shape == 8:
        return f"{draw(st.sampled_from(['isSemver', 'isQuantity']))}({expr(draw, 'string', depth + 1)})"
    if shape == 9:
        return f"{expr(draw, 'ints', depth + 1)}.isSorted()"
    if shape == 10:
        return f"{expr(draw, 'int', depth + 1)} in {expr(draw, 'ints', depth + 1)}"
    if shape == 11:
        return f"{expr(draw, 'strings', depth + 1)}.{draw(st.sampled_from(['includes', 'exists']))}" + (
            '("a")' if draw(st.booleans()) else '(s, s == "b")'
        )
    if shape == 12:  # mixes types on purpose: compile errors, or runtime errors through dyn values
        kinds = st.sampled_from(["int", "string", "quantity", "version", "bool"])
        return f"{expr(draw, draw(kinds), depth + 1)} == {expr(draw, draw(kinds), depth + 1)}"
    return _conditional(draw, "bool", depth)


@st.composite
def questions(draw: st.DrawFn) -> Obj:
    """One CEL question for the upstream program: expression, device and environment switches."""
    lists = draw(st.booleans())
    return {
        "expression": expr(draw, "bool"),
        "device": draw(devices(lists)),
        "consumableCapacity": draw(st.booleans()),
        "listTypeAttributes": lists,
        "newExpressions": draw(st.booleans()),
    }


# Result kinds of derived attribute expressions: attribute types, and one that is none (quantity).
DERIVED_KINDS = ["int", "string", "bool", "version", "ints", "strings", "quantity"]


@st.composite
def derived_questions(draw: st.DrawFn) -> Obj:
    """A question about a derived attribute's expression (DRADerivedAttributes): its value as an
    attribute, a compile error (also for a result type that is no attribute) or a runtime error."""
    question = draw(questions())
    question["expression"] = expr(draw, draw(st.sampled_from(DERIVED_KINDS)))
    question["derived"] = True
    return question

