"""A circuit breaker: stop calling a dead cache server for a cool-down, then probe again.

Without it every cache call against a dead or hung server costs a full timeout; with it a
job pays a few timeouts, then runs at source speed until a probe finds the server back.
The clock is injected so tests never sleep.
"""

import enum
import time
from typing import Callable


class State(enum.Enum):
    CLOSED = "closed"  # calls go through
    OPEN = "open"  # calls are refused until the cool-down has passed
    HALF_OPEN = "half_open"  # one probe call is let through


class CircuitBreaker:
    """Opens after ``failures`` consecutive failures; lets one probe through after ``cooldown`` s."""

    def __init__(
        self, failures: int = 2, cooldown: float = 5.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if failures < 1 or cooldown < 0:
            raise ValueError(f"breaker needs failures >= 1 and cooldown >= 0, got {failures}, {cooldown}")
        self.failures, self.cooldown, self.clock = failures, cooldown, clock
        self.state = State.CLOSED
        self.consecutive = 0
        self.opened_at = 0.0
        self.opens = 0

    def allow(self) -> bool:
        """May a call go to the server now?"""
        if self.state is State.OPEN and self.clock() - self.opened_at >= self.cooldown:
            self.state = State.HALF_OPEN
            return True
        return self.state is State.CLOSED or self.state is State.HALF_OPEN

    def success(self) -> None:
        self.state, self.consecutive = State.CLOSED, 0

    def failure(self) -> bool:
        """Record a failed call; True when this failure opened the breaker."""
        self.consecutive += 1
        if self.state is State.HALF_OPEN or self.consecutive >= self.failures:
            was_open = self.state is State.OPEN
            self.state, self.opened_at = State.OPEN, self.clock()
            if not was_open:
                self.opens += 1
                return True
        return False
