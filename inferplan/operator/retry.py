"""Work that failed for a passing reason, to be tried again: the one exception the controller retries."""

from __future__ import annotations


class RetryLater(Exception):
    """The work could not be done now (the API server unreachable, a planner process died) and is tried again
    after `delay` seconds; the plan's status keeps what it had meanwhile."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay
