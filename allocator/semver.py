"""Semantic versions (semver 2.0.0) with the parsing and precedence rules of blang/semver,
which Kubernetes uses for DRA version attributes and the CEL ``semver()`` library."""

from __future__ import annotations

import functools
import re

_IDENTIFIER = re.compile(r"[0-9A-Za-z-]+")
_NUMBER = re.compile(r"[0-9]+")


def _number(text: str, what: str, source: str) -> int:
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"invalid semantic version {source!r}: {what} {text!r} is not a number")
    if len(text) > 1 and text[0] == "0":
        raise ValueError(f"invalid semantic version {source!r}: {what} {text!r} has a leading zero")
    value = int(text)
    if value >= 2**64:
        raise ValueError(f"invalid semantic version {source!r}: {what} {text!r} is out of range")
    return value


def _prerelease_part(text: str, source: str) -> int | str:
    if not text:
        raise ValueError(f"invalid semantic version {source!r}: empty pre-release identifier")
    if _NUMBER.fullmatch(text):
        return _number(text, "pre-release identifier", source)
    if not _IDENTIFIER.fullmatch(text):
        raise ValueError(f"invalid semantic version {source!r}: invalid pre-release identifier {text!r}")
    return text


def _normalized(text: str) -> str:
    parts = text.removeprefix("v").split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            parts[i] = stripped if stripped[:1] in tuple("0123456789") else "0" + stripped
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise ValueError(f"invalid semantic version {text!r}: "
                             "short version cannot contain pre-release or build metadata")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


@functools.total_ordering
class Semver:
    """An immutable semantic version. Build metadata is kept for display but, as in semver 2.0.0,
    ignored by comparisons and equality."""

    __slots__ = ("build", "major", "minor", "patch", "prerelease")

    def __init__(self, major: int, minor: int, patch: int,
                 prerelease: tuple[int | str, ...] = (), build: tuple[str, ...] = ()) -> None:
        self.major = major
        self.minor = minor
        self.patch = patch
        self.prerelease = prerelease
        self.build = build

    @classmethod
    def parse(cls, text: str, *, normalize: bool = False) -> Semver:
        """Strict semver 2.0.0 parsing (no "v" prefix, no missing components, no leading zeros).

        With ``normalize`` (the CEL ``semver(text, true)`` form) a leading "v" is dropped, missing
        minor/patch components become 0 and leading zeros are removed first.
        """
        if not isinstance(text, str):
            raise ValueError(f"semantic version must be a string, got {type(text).__name__}")
        if normalize:
            text = _normalized(text)
        if not text:
            raise ValueError("invalid semantic version '': empty string")
        parts = text.split(".", 2)
        if len(parts) != 3:
            raise ValueError(f"invalid semantic version {text!r}: expected MAJOR.MINOR.PATCH")
        major = _number(parts[0], "major version", text)
        minor = _number(parts[1], "minor version", text)
        rest, _, build_text = parts[2].partition("+")
        patch_text, dash, prerelease_text = rest.partition("-")
        patch = _number(patch_text, "patch version", text)
        prerelease: tuple[int | str, ...] = ()
        if dash:
            prerelease = tuple(_prerelease_part(p, text) for p in prerelease_text.split("."))
        build: tuple[str, ...] = ()
        if "+" in parts[2]:
            build = tuple(build_text.split("."))
            if not all(_IDENTIFIER.fullmatch(b) for b in build):
                raise ValueError(f"invalid semantic version {text!r}: invalid build metadata {build_text!r}")
        return cls(major, minor, patch, prerelease, build)

    def _precedence_key(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        # A release sorts after all its pre-releases; numeric identifiers sort before alphanumeric ones.
        if not self.prerelease:
            return (self.major, self.minor, self.patch, 1, ())
        parts = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0, parts)

    def compare(self, other: Semver) -> int:
        mine, theirs = self._precedence_key(), other._precedence_key()
        return (mine > theirs) - (mine < theirs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._precedence_key() == other._precedence_key()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._precedence_key() < other._precedence_key()

    def __hash__(self) -> int:
        return hash(("Semver", self._precedence_key()))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(p) for p in self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"
