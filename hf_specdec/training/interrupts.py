"""Ctrl-C during training: the step under way finishes, a checkpoint of it is written, and the run stops with the
command that resumes it (`TrainingInterrupted`).

A KeyboardInterrupt raised at an arbitrary point could land between a parameter update and the step counter, so a
checkpoint written from there would hold a half-applied step. `StopAtStepEnd` therefore turns the first SIGINT into
a request that the training loop honours at the next step boundary; a second Ctrl-C stops at once (no checkpoint).
"""

from __future__ import annotations

import signal
import sys
import threading


class TrainingInterrupted(KeyboardInterrupt):
    """The run was stopped with Ctrl-C; the message says what was kept and the command that resumes."""


class StopAtStepEnd:
    """While active (a `with` block in the main thread), the first SIGINT sets `requested` instead of raising; the
    next one raises KeyboardInterrupt as usual. Outside the main thread it does nothing (signals only reach it)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = None

    def _on_sigint(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        try:  # no logging here: a signal handler must not take the logging locks
            sys.stderr.write(
                "\nCtrl-C: stopping once this step is done, then writing a checkpoint (Ctrl-C again: stop at once, "
                "without one)\n"
            )
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def __enter__(self) -> StopAtStepEnd:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


__all__ = ["StopAtStepEnd", "TrainingInterrupted"]
