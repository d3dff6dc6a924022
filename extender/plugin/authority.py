"""Whether this replica may write allocations now: its term.

A term begins once this replica may allocate (started, or elected leader) and its fence is done
(extender/plugin/fence.py), and ends when it loses the Lease or stops. A bind belongs to the term it began
in and writes nothing once that term is over, even if a later term has begun meanwhile: its choice of
devices was made from a view the other leader's allocations may have changed since.

Without leader election the first term begins after the start-up fence and lasts for the process's
life. `Authority.always()` (snapshot mode, tests) has a term from the start.
"""

from __future__ import annotations

from collections.abc import Callable

WAITING = "waiting for the start-up fence"


class Authority:
    def __init__(self, *, valid: Callable[[], bool] | None = None) -> None:
        """`valid`: read before every write, false as soon as this replica may no longer be the leader
        (the Lease's renew deadline passed), whatever the election loop has noticed yet."""
        self._valid = valid
        self._term = 0
        self._active = False
        self._reason = WAITING

    @property
    def reason(self) -> str:
        """Why there is no term now ("" while there is one), for /readyz and the verbs' refusals."""
        if self._active:
            if self._valid is None or self._valid():
                return ""
            return "the Lease was not renewed within its renew deadline (standby until it is again)"
        return self._reason

    @reason.setter
    def reason(self, reason: str) -> None:
        self._reason = reason

    @classmethod
    def always(cls) -> Authority:
        authority = cls()
        authority.begin()
        return authority

    @property
    def term(self) -> int | None:
        """The current term, or None while this replica may not allocate."""
        if self._active and (self._valid is None or self._valid()):
            return self._term
        return None

    def holds(self, term: int | None) -> bool:
        """May a bind begun in `term` still write?"""
        return term is not None and self.term == term

    def begin(self) -> int:
        self._term += 1
        self._active = True
        self._reason = ""
        return self._term

    def end(self, reason: str) -> None:
        self._active = False
        self._reason = reason
