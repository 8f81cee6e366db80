"""One dimension of a rate paced over sliding windows: no window of `seconds` carries
more than its share of the per-minute limit.

Providers state limits per minute and enforce them over much shorter periods (OpenAI:
"enforced over shorter periods"; a one-second window lets at most a second's share
through, whenever in it requests come). A bucket of a second's share lets its burst and
a second's refill go in one second: twice the share. So a `RateWindow`:

- spaces sends evenly at `FILL` of the rate (a generic cell rate: each send moves the
  next one's time on by its amount over that rate; a send may go `tolerance` early, the
  share the fill leaves of one window), so that a send delayed or hurried on its way by
  a few tens of milliseconds still meets a window with room;
- and keeps the log of the last window's sends, so that no window of `seconds` ever
  holds more than `WINDOW_FILL` of its share, whatever came before (a debt settled
  after the reply, a learnt limit taking over from requests that went unpaced).

`ready_in` says when an amount may go, `take` sends it now, `schedule` books it at the
earliest time it may go (a gateway granting sends ahead, to be made no sooner), `settle`
corrects an estimate by the real use. Time is given, never read: pure arithmetic.
"""

from __future__ import annotations

from collections import deque

__all__ = ["FILL", "WINDOW_FILL", "RateWindow", "crowded_pause"]

FILL = 0.925  # of the rate, what sends are spaced at
WINDOW_FILL = 0.96  # of a window's share, the most its log lets into any one window
_EPS = 1e-9


def crowded_pause(retry_after: float, seconds: float) -> float:
    """How long a 429 pauses a key paced over windows of `seconds`: a retry-after no
    longer than a window says a window was crowded (a send delayed on its way met
    one sent on time), not that the limit is wrong; the pace already keeps the next
    sends apart, so the key pauses for the window's slack only (the request itself
    waits its retry-after). A longer one (a quota, an overload) is kept."""
    if retry_after > seconds:
        return retry_after
    return min(retry_after, seconds * (1.0 - FILL))


class RateWindow:
    """One dimension's pace (see the module docstring); `rate` per second, the limit's."""

    __slots__ = ("cap", "log", "rate", "seconds", "tat", "tolerance")

    def __init__(self, rate: float, seconds: float, now: float) -> None:
        self.rate = self.seconds = self.cap = self.tolerance = 0.0
        self.set_rate(rate, seconds, now)
        self.tat = now  # when the next send is due, at the paced rate
        self.log: deque[list[float]] = deque()  # [sent at, amount], in time order

    def __repr__(self) -> str:
        return f"RateWindow(rate={self.rate:g}/s, window={self.seconds:g}s, cap={self.cap:g})"

    @property
    def capacity(self) -> float:
        """A window's share of the limit (at the fill its log holds)."""
        return self.cap

    @property
    def pace(self) -> float:
        """What is sent per second, at most, over time."""
        return self.rate * FILL

    def set_rate(self, rate: float, seconds: float, now: float) -> None:
        """A new rate (a learnt one) or window; what was sent stays counted."""
        if rate <= 0 or seconds <= 0:
            raise ValueError("a window's rate and length are positive")
        self.rate, self.seconds = rate, seconds
        self.cap = rate * seconds * WINDOW_FILL
        self.tolerance = seconds * (1.0 - FILL)

    def _in_window(self, at: float) -> float:
        """What the log holds in the window ending at `at` (`(at - seconds, at]`)."""
        start = at - self.seconds
        return sum(amount for stamp, amount in self.log if stamp > start)

    def _forget(self, now: float) -> None:
        log, start = self.log, now - self.seconds
        while log and log[0][0] <= start:
            log.popleft()

    def next_time(self, amount: float, now: float) -> float:
        """The earliest time from `now` at which `amount` may go."""
        self._forget(now)
        at = max(now, self.tat - self.tolerance)
        need = min(amount, self.cap)
        over = self._in_window(at) + need - self.cap
        if over > _EPS:
            start = at - self.seconds
            for stamp, sent in self.log:
                if stamp <= start:
                    continue
                over -= sent
                if over <= _EPS:
                    at = max(at, stamp + self.seconds)
                    break
            else:
                at = max(at, self.log[-1][0] + self.seconds)
        return at

    def ready_in(self, amount: float, now: float) -> float:
        """Seconds until `amount` may go (0: now)."""
        return max(0.0, self.next_time(amount, now) - now)

    def take(self, amount: float, now: float) -> None:
        """`amount` goes now."""
        self._book(amount, now)

    def schedule(self, amount: float, now: float) -> float:
        """Book `amount` at the earliest time it may go; that time."""
        at = self.next_time(amount, now)
        self._book(amount, at)
        return at

    def _book(self, amount: float, at: float) -> None:
        self.tat = max(self.tat, at) + amount / self.pace
        self._log(amount, at)

    def _log(self, amount: float, at: float) -> None:
        log = self.log
        index = len(log)
        while index and log[index - 1][0] > at:  # booked ahead of a send now: in order
            index -= 1
        log.insert(index, [at, amount])

    def settle(self, reserved: float, used: float, now: float) -> None:
        """A send of `reserved` used `used`: the excess is owed (counted now and paced),
        the rest comes back off the oldest sends of the window (which only ever
        counts them as late as they were)."""
        extra = used - reserved
        if extra > _EPS:
            self._book(extra, now)
        elif extra < -_EPS:
            back = -extra
            self.tat = max(now, self.tat - back / self.pace)
            for entry in self.log:
                given = min(entry[1], back)
                entry[1] -= given
                back -= given
                if back <= _EPS:
                    break

    def spent(self, amount: float, now: float) -> None:
        """`amount` went unpaced lately (before this window held the rate): it fills this
        window, and the pace starts from now."""
        self.tat = max(self.tat, now)
        self._log(amount, now)

    def empty(self, now: float) -> None:
        """The provider said nothing is left (a 429): no early send until the pace
        catches up from `now`."""
        self.tat = max(self.tat, now + self.tolerance)
