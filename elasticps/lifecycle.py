"""The shape every role's life shares: explicit states, a table of the transitions allowed, one
:meth:`Lifecycle.step` per transition, and ONE :class:`contextlib.ExitStack` that stops whatever
was started, in reverse order, from any state.

A subclass gives the transition table (a state with no way out is final) and one method per
state (``steps``); ``step()`` runs the method of the current state and refuses a transition
the table does not allow, so the table is the truth a test can read.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, TypeVar

log = logging.getLogger(__name__)

State = TypeVar("State", bound=enum.Enum)


class Lifecycle(Generic[State]):
    """A state machine stepped one transition at a time; :meth:`run` steps it to the end."""

    # Keyed by the subclass's own state enum (ClassVars cannot name the type variable).
    transitions: ClassVar[Mapping[Any, frozenset[Any]]]
    steps: ClassVar[Mapping[Any, Callable[..., Any]]]

    def __init__(self, initial: State, name: str) -> None:
        self.state: State = initial
        self.name = name  # for log lines and errors: "master master-h-1 of job ctr"
        self.exit_code: int | None = None  # set by the step that reaches a final state
        self._stack = contextlib.ExitStack()

    def is_final(self, state: State | None = None) -> bool:
        return not self.transitions[self.state if state is None else state]

    def step(self) -> State:
        """Make one transition and return the new state (a final state stays as it is)."""
        before = self.state
        if self.is_final(before):
            return before
        after = self._act(before)
        if after not in self.transitions[before]:
            raise RuntimeError(f"{self.name}: transition {before.name} -> {after.name} is not "
                               "allowed")
        if after is not before:
            log.debug("%s: %s -> %s.", self.name, before.name, after.name)
        self.state = after
        return after

    def _act(self, state: State) -> State:
        """Run the current state's method; a subclass may wrap it (to map an error to a
        transition, say)."""
        after: State = self.steps[state](self)
        return after

    def run(self) -> int:
        """Step until a final state and return the exit code its step set. An unexpected error
        stops whatever had started and propagates."""
        try:
            while not self.is_final(self.step()):
                pass
        finally:
            self.close()
        assert self.exit_code is not None, f"{self.name} ended without an exit code"
        return self.exit_code

    def close(self) -> None:
        """Stop whatever has started, in reverse start order. Idempotent."""
        self._stack.close()
