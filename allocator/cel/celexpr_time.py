"""Where cel-cpp's durations and timestamps answer differently from cel-go, for the cel-expr engine.

cel-cpp keeps durations and timestamps natively; the backend renames the few calls whose results
differ (found where the checker types the argument): ``int(duration)`` (nanoseconds; cel-cpp has no
such conversion), ``string(duration)`` and ``string(timestamp)`` (Go's formats), and a duration's
``getMilliseconds()`` (cel-go: the whole duration in milliseconds, cel-cpp: the milliseconds field).

cel-cpp timestamps keep no UTC offset, so ``string()`` of a timestamp always ends in "Z" where
cel-go prints the offset it was written with (a documented difference).
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from cel_expr_python import cel

from allocator.cel import timelib

T = cel.Type

# Phase one renames (as long as the originals, so checker positions stay right) ...
INT, STRING_OF_DURATION, STRING_OF_TIMESTAMP = "_di", "_dstr_", "_tstr_"
PARSE_DURATION, PARSE_TIMESTAMP = "_dur_str", "_ts_parse"
MILLISECONDS = "_durationMillis"
# ... and phase two wraps cel-cpp's own string conversion, which is exact to the nanosecond
# ("3600.000000001s", "2019-12-31T23:00:00.000000001Z"), in a function giving cel-go's answer; and
# hands a string to convert to cel-cpp only after Go's parser has put it in a form cel-cpp reads alike.
WRAPPERS = {INT: "_durationNanos(string(", STRING_OF_DURATION: "_goDuration(string(",
            STRING_OF_TIMESTAMP: "_goTimestamp(string(", PARSE_DURATION: "duration(_goDurationText(",
            PARSE_TIMESTAMP: "timestamp(_goTimestampText("}


def _duration_nanos(text: str) -> int:
    """The nanoseconds of cel-cpp's string of a duration: [-]seconds[.fraction]s."""
    seconds = Decimal(text.removesuffix("s"))
    return int(seconds * timelib.NANOS)


def _go_timestamp(text: str) -> str:
    moment = timelib.parse_timestamp(text)  # UTC: cel-cpp keeps no offset (see above)
    return str(timelib.Timestamp(moment.seconds, moment.nanos))


def _milliseconds(value: datetime.timedelta) -> int:
    nanos = (value.days * 86_400 + value.seconds) * timelib.NANOS + value.microseconds * 1000
    return timelib.Duration(nanos).part("ms")


def overloads() -> dict[str, list[Any]]:
    S = T.STRING
    return {
        "_durationNanos": [cel.Overload("go_duration_nanos", T.INT, [S], impl=_duration_nanos)],
        "_goDuration": [
            cel.Overload("go_duration_string", S, [S],
                         impl=lambda text: str(timelib.Duration(_duration_nanos(text))))],
        "_goTimestamp": [cel.Overload("go_timestamp_string", S, [S], impl=_go_timestamp)],
        # only for the checker of phase one; phase two replaces every call
        INT: [cel.Overload("duration_to_int_ns", T.INT, [T.DURATION], impl=_unreachable)],
        STRING_OF_DURATION: [cel.Overload("duration_to_go_string", S, [T.DURATION], impl=_unreachable)],
        STRING_OF_TIMESTAMP: [cel.Overload("timestamp_to_go_string", S, [T.TIMESTAMP], impl=_unreachable)],
        MILLISECONDS: [cel.Overload("duration_total_milliseconds", T.INT, [T.DURATION], is_member=True,
                                    impl=_milliseconds)],
        # a dynamic argument may also hold what else duration() and timestamp() take (a value that
        # crosses into Python this way keeps microseconds only)
        "_goDurationText": [cel.Overload("go_duration_text", S, [S], impl=_duration_text),
                            cel.Overload("go_duration_same", T.DURATION, [T.DURATION], impl=_same)],
        "_goTimestampText": [cel.Overload("go_timestamp_text", S, [S], impl=_timestamp_text),
                             cel.Overload("go_timestamp_seconds", T.INT, [T.INT], impl=int),
                             cel.Overload("go_timestamp_same", T.TIMESTAMP, [T.TIMESTAMP], impl=_same)],
        PARSE_DURATION: [cel.Overload("string_to_go_duration", T.DURATION, [S], impl=_unreachable)],
        PARSE_TIMESTAMP: [cel.Overload("string_to_go_timestamp", T.TIMESTAMP, [S], impl=_unreachable)],
    }


def _duration_text(text: str) -> str:
    try:
        return f"{timelib.duration_of(text).nanos}ns"
    except timelib.TimeError as err:
        raise ValueError(str(err)) from None


def _timestamp_text(text: str) -> str:
    try:
        moment = timelib.timestamp_of(text)
    except timelib.TimeError as err:
        raise ValueError(str(err)) from None
    return str(timelib.Timestamp(moment.seconds, moment.nanos))


def _same(value: object) -> object:
    return value


def _unreachable(value: object) -> object:
    raise AssertionError("renamed call left in place")


def canonical_literal(function: str, text: str) -> str | None:
    """The text cel-cpp parses to the value cel-go gives a valid literal (None when invalid): a
    duration in nanoseconds, a timestamp in UTC."""
    try:
        if function == "duration":
            return f"{timelib.parse_duration(text).nanos}ns"
        moment = timelib.parse_timestamp(text)
    except timelib.TimeError:
        return None
    return str(timelib.Timestamp(moment.seconds, moment.nanos))
