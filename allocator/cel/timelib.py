"""CEL durations and timestamps as cel-go has them (Go's time package underneath).

A duration is a whole number of nanoseconds within int64; a timestamp is an instant between
0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999999Z that keeps the UTC offset it was written
with (``string()`` prints it; equality and order look at the instant only). Parsing follows Go's
``time.ParseDuration`` and ``time.Parse(time.RFC3339, ...)``. Getters without a time zone read UTC
(the Kubernetes environment sets cel.DefaultUTCTimeZone).

The celpy engine uses these values; the checker uses the parsers to refuse invalid literals at
compile time, as cel-go's ValidateDurationLiterals / ValidateTimestampLiterals do.
"""

from __future__ import annotations

import datetime
import zoneinfo
from dataclasses import dataclass, field
from decimal import Decimal

NANOS = 10**9
_INT64_MAX = 2**63 - 1
MIN_UNIX, MAX_UNIX = -62135596800, 253402300799
_UNITS = {"ns": 1, "us": 10**3, "\u00b5s": 10**3, "\u03bcs": 10**3, "ms": 10**6, "s": NANOS,
          "m": 60 * NANOS, "h": 3600 * NANOS}
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class TimeError(ValueError):
    """An invalid duration or timestamp, or one out of range."""


def _truncated_division(a: int, b: int) -> int:
    quotient = abs(a) // b
    return quotient if a >= 0 else -quotient


@dataclass(frozen=True, slots=True, order=True)
class Duration:
    nanos: int

    def __post_init__(self) -> None:
        if not -_INT64_MAX - 1 <= self.nanos <= _INT64_MAX:
            raise TimeError("integer overflow")

    def __add__(self, other: object) -> Duration | Timestamp:
        if isinstance(other, Timestamp):
            return other + self
        if isinstance(other, Duration):
            return Duration(self.nanos + other.nanos)
        return NotImplemented

    def __sub__(self, other: object) -> Duration:
        if isinstance(other, Duration):
            return Duration(self.nanos - other.nanos)
        return NotImplemented

    def __neg__(self) -> Duration:
        return Duration(-self.nanos)

    def __str__(self) -> str:
        # Go: strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
        whole, fraction = divmod(abs(self.nanos), NANOS)
        seconds = float(whole) + float(fraction) / 1e9
        text = format(Decimal(repr(seconds)), "f").removesuffix(".0")
        return ("-" if self.nanos < 0 and seconds else "") + text + "s"

    def part(self, unit: str) -> int:
        """getHours / getMinutes / getSeconds / getMilliseconds: whole units, toward zero."""
        return _truncated_division(self.nanos, {"h": 3600 * NANOS, "m": 60 * NANOS, "s": NANOS,
                                                "ms": 10**6}[unit])


@dataclass(frozen=True, slots=True)
class Timestamp:
    seconds: int  # since the Unix epoch, UTC
    nanos: int = 0
    offset: int = field(default=0, compare=False)  # seconds east of UTC it was written with

    def __post_init__(self) -> None:
        if not MIN_UNIX <= self.seconds <= MAX_UNIX:
            raise TimeError("timestamp overflow")

    def _key(self) -> tuple[int, int]:
        return self.seconds, self.nanos

    def __lt__(self, other: Timestamp) -> bool:
        return self._key() < other._key()

    def __le__(self, other: Timestamp) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: Timestamp) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: Timestamp) -> bool:
        return self._key() >= other._key()

    def __add__(self, other: object) -> Timestamp:
        if not isinstance(other, Duration):
            return NotImplemented
        seconds, nanos = divmod(self.nanos + other.nanos, NANOS)
        return Timestamp(self.seconds + seconds, nanos, self.offset)

    __radd__ = __add__

    def __sub__(self, other: object) -> Timestamp | Duration:
        if isinstance(other, Duration):
            return self + Duration(-other.nanos)
        if isinstance(other, Timestamp):
            return Duration((self.seconds - other.seconds) * NANOS + self.nanos - other.nanos)
        return NotImplemented

    def local(self, offset: int | None = None, zone: datetime.tzinfo | None = None) -> datetime.datetime:
        instant = EPOCH + datetime.timedelta(seconds=self.seconds)
        if zone is not None:
            return instant.astimezone(zone)
        return instant.astimezone(datetime.timezone(datetime.timedelta(seconds=offset or 0)))

    def __str__(self) -> str:
        # Go: t.Format(time.RFC3339Nano), in the offset it was written with
        moment = EPOCH + datetime.timedelta(seconds=self.seconds + self.offset)
        text = f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:" \
               f"{moment.minute:02d}:{moment.second:02d}"
        if self.nanos:
            text += "." + f"{self.nanos:09d}".rstrip("0")
        if not self.offset:
            return text + "Z"
        sign = "-" if self.offset < 0 else "+"
        hours, minutes = divmod(abs(self.offset) // 60, 60)
        return f"{text}{sign}{hours:02d}:{minutes:02d}"

    def get(self, function: str, zone_name: str | None = None) -> int:
        """The timestamp getters, in UTC or in ``zone_name`` (an IANA name or [+-]HH:MM)."""
        zone = time_zone(zone_name) if zone_name is not None else 0
        if isinstance(zone, int):  # seconds east of UTC, of any size (Go's time.FixedZone)
            try:
                moment = EPOCH + datetime.timedelta(seconds=self.seconds + zone)
            except OverflowError:
                raise TimeError(f"time zone offset out of range: {zone_name}") from None
        else:
            moment = self.local(zone=zone)
        if function == "getFullYear":
            return moment.year
        if function == "getMonth":
            return moment.month - 1
        if function == "getDayOfYear":
            return moment.timetuple().tm_yday - 1
        if function == "getDayOfMonth":
            return moment.day - 1
        if function == "getDate":
            return moment.day
        if function == "getDayOfWeek":
            return (moment.weekday() + 1) % 7  # Sunday is 0
        if function == "getHours":
            return moment.hour
        if function == "getMinutes":
            return moment.minute
        if function == "getSeconds":
            return moment.second
        return self.nanos // 10**6  # getMilliseconds


def _go_atoi(text: str) -> int:
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        raise TimeError(f'strconv.Atoi: parsing "{text}": invalid syntax')
    return int(text)


def time_zone(name: str) -> datetime.tzinfo | int:
    """cel-go's time zone argument: a location name, or an offset "[+-]H:M" (as seconds east of UTC;
    cel-go reads both parts with strconv.Atoi and checks neither's range)."""
    colon = name.find(":")
    if colon < 0:
        if name in ("", "UTC"):
            return datetime.UTC
        try:
            return zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise TimeError(f"unknown time zone {name}") from None
    hours, minutes = _go_atoi(name[:colon]), _go_atoi(name[colon + 1:])
    offset = hours * 60 - minutes if name[0] == "-" else hours * 60 + minutes
    return offset * 60


def _leading_int(text: str) -> tuple[int, str]:
    i, value = 0, 0
    while i < len(text) and "0" <= text[i] <= "9":
        value = value * 10 + ord(text[i]) - 48
        if value > 2**63:
            raise TimeError("invalid duration")
        i += 1
    return value, text[i:]


def _leading_fraction(text: str) -> tuple[int, int, str]:
    i, value, scale, overflow = 0, 0, 1, False
    while i < len(text) and "0" <= text[i] <= "9":
        if not overflow:
            if value > _INT64_MAX // 10:
                overflow = True
            else:
                value, scale = value * 10 + ord(text[i]) - 48, scale * 10
        i += 1
    return value, scale, text[i:]


def parse_duration(text: str) -> Duration:
    """Go's time.ParseDuration: [-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+, or "0"."""
    rest, negative = text, False
    if rest[:1] in ("-", "+"):
        negative, rest = rest[0] == "-", rest[1:]
    if rest == "0":
        return Duration(0)
    if not rest:
        raise TimeError(f'time: invalid duration "{text}"')
    total = 0
    while rest:
        if not (rest[0] == "." or "0" <= rest[0] <= "9"):
            raise TimeError(f'time: invalid duration "{text}"')
        before = len(rest)
        whole, rest = _leading_int(rest)
        has_whole = len(rest) != before
        fraction, scale, has_fraction = 0, 1, False
        if rest[:1] == ".":
            rest = rest[1:]
            before = len(rest)
            fraction, scale, rest = _leading_fraction(rest)
            has_fraction = len(rest) != before
        if not has_whole and not has_fraction:
            raise TimeError(f'time: invalid duration "{text}"')
        end = 0
        while end < len(rest) and not (rest[end] == "." or "0" <= rest[end] <= "9"):
            end += 1
        if end == 0:
            raise TimeError(f'time: missing unit in duration "{text}"')
        unit = _UNITS.get(rest[:end])
        if unit is None:
            raise TimeError(f'time: unknown unit "{rest[:end]}" in duration "{text}"')
        rest = rest[end:]
        if whole > 2**63 // unit:
            raise TimeError(f'time: invalid duration "{text}"')
        whole *= unit
        if fraction:
            whole += int(float(fraction) * (float(unit) / scale))
            if whole > 2**63:
                raise TimeError(f'time: invalid duration "{text}"')
        total += whole
        if total > 2**63:
            raise TimeError(f'time: invalid duration "{text}"')
    if negative:
        return Duration(-total)
    if total > _INT64_MAX:
        raise TimeError(f'time: invalid duration "{text}"')
    return Duration(total)


def _number(text: str, low: int, high: int) -> int:
    if len(text) == 0 or not all("0" <= c <= "9" for c in text):
        raise TimeError("bad number")
    value = int(text)
    if not low <= value <= high:
        raise TimeError("out of range")
    return value


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def parse_timestamp(text: str) -> Timestamp:
    """Go's time.Parse(time.RFC3339, text), within CEL's timestamp range."""
    try:
        return _parse_rfc3339(text)
    except TimeError as err:
        raise TimeError(f'invalid timestamp "{text}": {err}') from None


def _parse_rfc3339(text: str) -> Timestamp:
    if len(text) < 19 or (text[4], text[7], text[10], text[13], text[16]) != ("-", "-", "T", ":", ":"):
        raise TimeError("not RFC 3339")
    year = _number(text[0:4], 0, 9999)
    month = _number(text[5:7], 1, 12)
    day = _number(text[8:10], 1, _days_in(month, year))
    hour, minute = _number(text[11:13], 0, 23), _number(text[14:16], 0, 59)
    second = _number(text[17:19], 0, 59)
    rest, nanos = text[19:], 0
    if len(rest) >= 2 and rest[0] in ".," and "0" <= rest[1] <= "9":
        end = 1
        while end < len(rest) and "0" <= rest[end] <= "9":
            end += 1
        digits = rest[1:end]
        nanos = int((digits + "0" * 9)[:9])
        rest = rest[end:]
    offset = 0
    if rest != "Z":
        if len(rest) != 6 or rest[0] not in "+-" or rest[3] != ":":
            raise TimeError("bad time zone")
        # Go's general parser (after its RFC 3339 fast path fails) takes offsets up to 24:60
        offset = (_number(rest[1:3], 0, 24) * 60 + _number(rest[4:6], 0, 60)) * 60
        if rest[0] == "-":
            offset = -offset
    if year == 0:  # before Python's calendar; out of CEL's range anyway
        raise TimeError("timestamp overflow")
    days = (datetime.date(year, month, day) - datetime.date(1970, 1, 1)).days
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset
    return Timestamp(seconds, nanos, offset)


def duration_of(text: str) -> Duration:
    """``duration(text)`` as cel-go converts it: Go's parser, and cel-go's error where it fails."""
    try:
        return parse_duration(text)
    except TimeError:
        raise TimeError("type conversion error from 'string' to 'google.protobuf.Duration'") from None


def timestamp_of(text: str) -> Timestamp:
    """``timestamp(text)`` as cel-go converts it: an instant out of CEL's range is an overflow, any
    other failure cel-go's conversion error."""
    try:
        return _parse_rfc3339(text)
    except TimeError as err:
        if str(err) == "timestamp overflow":
            raise
        raise TimeError("type conversion error from 'string' to 'google.protobuf.Timestamp'") from None


def from_unix(seconds: int) -> Timestamp:
    return Timestamp(seconds)
