"""Password checks per user, rate-limited: a password check costs an scrypt (~50 ms of a core, on purpose), so one
user sending wrong passwords as fast as they can would take the cores every other user's commands need.

The window is ``limits``'s moving window in memory (per process, as the check is): every check of a user's
password counts, right or wrong, since each costs the same; past the limit the command is refused with YTsaurus's
"request rate limit" error (904, HTTP 429) before any hash is computed, naming the user and when to retry.
``limits`` (the library behind Flask-Limiter and SlowAPI) was chosen over a hand-written bucket: its moving window
is exact, thread-safe and forgets idle keys by itself.
"""

from __future__ import annotations

import math
import time

from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from pooltree.errors import PooltreeError

REQUEST_RATE_LIMIT_EXCEEDED = 904
PASSWORD_CHECK_LIMITS = "5/second;60/minute"
"""Password checks one user's password may have: a person or a script of theirs never needs more."""


class PasswordThrottle:
    """``admit(user)`` before each check of ``user``'s password; raises error 904 past the limits."""

    def __init__(self, limits: str = PASSWORD_CHECK_LIMITS) -> None:
        self.description = limits
        self.items: list[RateLimitItem] = parse_many(limits)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def admit(self, user: str) -> None:
        for item in self.items:
            if not self._limiter.hit(item, "password", user):
                reset = self._limiter.get_window_stats(item, "password", user).reset_time
                retry = max(1, math.ceil(reset - time.time()))
                raise PooltreeError(
                    f"Too many password checks for user {user!r} (at most {self.description}): retry in {retry} s",
                    code=REQUEST_RATE_LIMIT_EXCEEDED,
                    attributes={"user": user, "limit": str(item), "retry_after": retry},
                )
