"""Schema-driven fuzzing of JSON payloads: take a payload shaped exactly as its real sender sends it and
replace the value at one of its paths with a value of another shape (null, a scalar, a list with a
null, an object of the wrong kind, a number too big for Go's int64, ...).

Valid JSON of the wrong shape is what reaches code past the decoder; random JSON from scratch rarely
gets past the first field check.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

Path = tuple[str | int, ...]

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
ODD_VALUES = st.recursive(
    SCALARS | st.sampled_from([[None], [[]], [{}], {}, {"metadata": None}, {"name": 7}, "oops", [""]]),
    lambda children: (st.lists(children, max_size=3)
                      | st.dictionaries(st.text(max_size=6), children, max_size=3)),
    max_leaves=6,
)


def paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every path into `value`, the root included."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


def replaced(value: Any, path: Path, new: Any) -> Any:
    if not path:
        return new
    result = copy.deepcopy(value)
    target = result
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return result


@st.composite
def mutations(draw: st.DrawFn, payload: Any) -> Any:
    """`payload` with the value at one path replaced by one of another shape; a few times in a row."""
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(paths(payload))))
        payload = replaced(payload, path, draw(ODD_VALUES))
    return payload
