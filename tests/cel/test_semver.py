import itertools

import pytest

from allocator.semver import Semver


def test_parse_components() -> None:
    v = Semver.parse("1.22.333-rc.1+build.5")
    assert (v.major, v.minor, v.patch) == (1, 22, 333)
    assert v.prerelease == ("rc", 1)
    assert v.build == ("build", "5")
    assert str(v) == "1.22.333-rc.1+build.5"


@pytest.mark.parametrize(
    "text",
    ["", "1", "1.0", "v1.0.0", "01.0.0", "1.02.0", "1.0.00", "1.0.0-", "1.0.0-01", "1.0.0+", "1.0.0-a..b",
     "1.0.0-a_b", "a.b.c", "1.0.0.0", " 1.0.0"],
)
def test_strict_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="semantic version"):
        Semver.parse(text)


@pytest.mark.parametrize(
    ("text", "normalized"),
    [("v1.0.0", "1.0.0"), ("1.0", "1.0.0"), ("1", "1.0.0"), ("01.01.01", "1.1.1"),
     ("v2.00.3-rc.1", "2.0.3-rc.1")],
)
def test_normalized_parse(text: str, normalized: str) -> None:
    assert str(Semver.parse(text, normalize=True)) == normalized


def test_normalized_short_version_rejects_prerelease() -> None:
    with pytest.raises(ValueError, match="short version"):
        Semver.parse("1.0-rc", normalize=True)


def test_precedence_follows_semver_2() -> None:
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
               "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "2.0.0"]
    versions = [Semver.parse(t) for t in ordered]
    assert sorted(reversed(versions)) == versions
    assert [a.compare(b) for a, b in itertools.pairwise(versions)] == [-1] * (len(versions) - 1)


def test_build_metadata_is_ignored_for_equality() -> None:
    assert Semver.parse("1.0.0+a") == Semver.parse("1.0.0+b")
    assert hash(Semver.parse("1.0.0+a")) == hash(Semver.parse("1.0.0"))
    assert Semver.parse("1.0.0+a").compare(Semver.parse("1.0.0")) == 0
