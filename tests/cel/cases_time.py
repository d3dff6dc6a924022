"""Conformance cases for CEL durations, timestamps and type values, run against every engine.

Expected results are upstream's (cel-go in the Kubernetes environment, which reads timestamps in UTC
unless a time zone is given): Go's ParseDuration and RFC 3339 parsing, literals checked at compile
time, nanosecond precision, and the cost estimator's view of type values (no size, so comparing
them has no bound: refused under the cost limit, evaluated without it).
"""

from __future__ import annotations

from case import CelCase

from allocator.cel.backend import CompileOptions

T0 = 'timestamp("2020-01-01T00:00:00Z")'


def _cases(prefix: str, rows: list[tuple[str, object]], **extra: object) -> list[CelCase]:
    return [CelCase(f"{prefix}: {expression}", expression, expect, **extra)  # type: ignore[arg-type]
            for expression, expect in rows]


DURATIONS = _cases("duration", [
    ('duration("1h") > duration("59m")', True),
    ('duration("1h30m").getMinutes() == 90 && duration("1h").getHours() == 1', True),
    ('duration("1.5s").getMilliseconds() == 1500 && duration("-1.5s").getSeconds() == -1', True),
    ('duration("1µs") == duration("1000ns") && duration("1us") == duration("1µs")', True),
    ('duration("0") == duration("0s") && duration("-0") == duration("0s")', True),
    ('duration("+3s") == duration("3s") && duration(".5s") == duration("500ms")', True),
    ('duration("1.h") == duration("1h") && duration("5.s") == duration("5s")', True),
    ('duration(duration("1s")) == duration("1s")', True),
    ('int(duration("1s")) == 1000000000', True),
    ('string(duration("1.5s")) == "1.5s" && string(duration("-90m")) == "-5400s"', True),
    ('string(duration("1ns")) == "0.000000001s" && string(duration("0s")) == "0s"', True),
    ('string(duration("1h0m0.000000001s")) == "3600.000000001s"', True),
    ('duration("9223372036854775807ns") > duration("0s")', True),
    ('duration("9223372036854775808ns") > duration("0s")', "compile_error"),
    ('duration("1d") > duration("0s")', "compile_error"),
    ('duration("") > duration("0s")', "compile_error"),
    ('-duration("1h") < duration("0s")', "compile_error"),
    ('duration("1h") + duration("1m") == duration("61m")', True),
])

TIMESTAMPS = _cases("timestamp", [
    (f"{T0}.getFullYear() == 2020 && {T0}.getMonth() == 0 && {T0}.getDayOfYear() == 0", True),
    (f"{T0}.getDate() == 1 && {T0}.getDayOfMonth() == 0 && {T0}.getDayOfWeek() == 3", True),
    (f'{T0}.getHours("+05:30") == 5 && {T0}.getMinutes("+05:30") == 30', True),
    (f'{T0}.getHours("America/New_York") == 19 && {T0}.getHours("-0:30") == 23', True),
    (f'{T0}.getHours("Nowhere/City") == 19', "runtime_error"),
    # cel-go reads an offset's hours and minutes with strconv.Atoi and checks neither's range
    (f'{T0}.getHours("+1:60") == 2 && {T0}.getHours("-0:90") == 22 && {T0}.getHours("+30:00") == 6', True),
    ('timestamp("2020-01-01T00:00:00.123Z").getMilliseconds() == 123', True),
    (f'timestamp("2020-01-01T00:00:00+01:00") < {T0}', True),
    (f'{T0} - timestamp("2019-12-31T00:00:00Z") == duration("24h")', True),
    (f'{T0} + duration("1h") > {T0} && duration("1h") + {T0} > {T0}', True),
    ('timestamp(0) == timestamp("1970-01-01T00:00:00Z")', True),
    ('int(timestamp("2020-01-01T00:00:00Z")) == 1577836800', True),
    ('string(timestamp("2020-01-01T00:00:00.120Z")) == "2020-01-01T00:00:00.12Z"', True),
    ('string(timestamp(timestamp(5))) == "1970-01-01T00:00:05Z"', True),
    ('timestamp("2020-01-01T00:00:00,5Z") > timestamp(0)', True),
    ('timestamp("9999-12-31T23:59:59Z") + duration("1s") > timestamp(0)', "runtime_error"),
    ('timestamp(0 + 253402300800) > timestamp(0)', "runtime_error"),
    ('timestamp(253402300800) > timestamp(0)', "compile_error"),
    ('timestamp("2020-01-01") < timestamp(0)', "compile_error"),
    ('timestamp("2020-01-01t00:00:00Z") < timestamp(0)', "compile_error"),
    ('timestamp("2020-02-30T00:00:00Z") < timestamp(0)', "compile_error"),
    ('timestamp("0000-01-01T00:00:00Z") < timestamp(0)', "compile_error"),
    ('timestamp(1) + timestamp(2) > timestamp(0)', "compile_error"),
    ('duration("1s") - timestamp(2) > timestamp(0)', "compile_error"),
])

TYPES = [
    *_cases("type values", [
        ("type(1) == int", "compile_error"),
        ("type(duration('1s')) == google.protobuf.Duration", "compile_error"),
    ]),
    *_cases("type values without the limit", [
        ('type(1) == int && type("a") == string && type(1u) == uint && type(1.0) == double', True),
        ("type([]) == list && type({}) == map && type(null) == null_type && type(int) == type", True),
        ('type(device.attributes["gpu.example.com"].index) == int', True),
        ('type(device.attributes["gpu.example.com"].driverVersion) == string', False),
        ("string(type(1))", "compile_error"),
    ], options=CompileOptions(cost_limit=None)),
]

CASES: list[CelCase] = [*DURATIONS, *TIMESTAMPS, *TYPES]
