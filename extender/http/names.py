"""How users name namespaced objects on the command line and in debug URLs: `NAMESPACE/NAME`, or `NAME`
alone for the namespace given separately (`default` unless told otherwise), as kubectl does."""

from __future__ import annotations

DEFAULT_NAMESPACE = "default"


def split_ref(text: str, namespace: str | None = None) -> tuple[str, str]:
    """(namespace, name) of `NAMESPACE/NAME` or `NAME`. Raises ValueError naming what is wrong.

    `namespace` is where a bare NAME lives (None: `default`); a `NAMESPACE/NAME` that contradicts it
    is refused rather than silently preferred, as `kubectl get ns-a/x -n ns-b` would be ambiguous."""
    head, sep, name = text.partition("/")
    if not sep:
        head, name = namespace or DEFAULT_NAMESPACE, text
    if not head or not name or "/" in name:
        raise ValueError(f"expected NAME or NAMESPACE/NAME, got {text!r}")
    if sep and namespace and namespace != head:
        raise ValueError(f"{text!r} names namespace {head!r} but the namespace given is {namespace!r}")
    return head, name
