"""`RateWindow` on a driven clock: sends spaced at `FILL` of the limit, never more than a
window's share in any window of its length (however many ask at once, whatever was
sent before), a schedule booked ahead, estimates settled, and a 429's pause (a crowded
window's: its slack)."""

from __future__ import annotations

import pytest

from raygent import RateLimit
from raygent.rates import FILL, RatePacer, RateReading, RateWindow, crowded_pause, need_of
from raygent.rates.learner import CROWDED


def most_in_window(times: list[float], seconds: float = 1.0) -> int:
    """The most of `times` within any window `(end - seconds, end]`."""
    return max(sum(1 for t in times if end - seconds < t <= end) for end in times)


def drain(window: RateWindow, count: int, now: float = 0.0, amount: float = 1.0) -> list[float]:
    """`count` sends asking at once from `now`: each goes as soon as it may."""
    sent = []
    for _ in range(count):
        now += window.ready_in(amount, now)
        window.take(amount, now)
        sent.append(now)
    return sent


def test_sends_asking_at_once_are_spaced_under_the_windows_share() -> None:
    window = RateWindow(20.0, 1.0, now=0.0)  # 1,200 a minute over one-second windows
    sent = drain(window, 400)
    assert most_in_window(sent) <= 19  # a one-second window admits 20
    assert sent[-1] - sent[-101] == pytest.approx(100 / (20 * FILL))  # at FILL of the rate


def test_what_went_before_the_window_held_the_rate_counts() -> None:
    window = RateWindow(20.0, 1.0, now=0.0)
    window.spent(19.0, 0.0)  # 19 went unpaced just now
    assert window.ready_in(1.0, 0.0) == pytest.approx(1.0)  # the window is full until then
    sent = [0.0] * 19 + drain(window, 40)
    assert most_in_window(sent) <= 19


def test_a_longer_window_lets_its_share_go_sooner_yet_never_more() -> None:
    """A minute's window (`burst=60`): a burst of the share the fill leaves, then the
    pace; no minute carries more than the minute's share."""
    window = RateWindow(20.0, 60.0, now=0.0)
    sent = drain(window, 3000)
    burst = sum(1 for t in sent if t == 0.0)
    assert burst == pytest.approx(60 * (1 - FILL) * 20 * FILL, abs=2)
    assert most_in_window(sent[:1300], 60.0) <= 1200 * 0.96 + 1


def test_a_schedule_booked_ahead_is_spaced_as_sends_are() -> None:
    window = RateWindow(20.0, 1.0, now=0.0)
    booked = [window.schedule(1.0, 0.0) for _ in range(60)]  # all granted now
    assert booked == sorted(booked) and booked[-1] > 2.5
    assert most_in_window(booked) <= 19
    # A send asking at the time of the tenth goes after the last booked: none jumps in.
    assert window.next_time(1.0, booked[9]) > booked[-1]


def test_an_estimate_settles_at_the_real_use() -> None:
    window = RateWindow(100.0, 1.0, now=0.0)  # tokens: 100 a second, 96 in a window
    window.take(50.0, 0.0)
    assert window.ready_in(50.0, 0.0) == pytest.approx(1.0)  # 50 + 50 over 96
    window.settle(50.0, 10.0, 0.0)  # it used 10: 40 back
    assert window.ready_in(50.0, 0.0) == pytest.approx(10 / (100 * FILL) - 0.075)
    window.settle(10.0, 90.0, 0.0)  # and another 80 beyond: owed, counted now
    assert window.ready_in(50.0, 0.0) == pytest.approx(1.0)


def test_a_429_moves_the_next_send_past_its_pause() -> None:
    window = RateWindow(20.0, 1.0, now=0.0)
    window.take(1.0, 0.0)
    window.empty(2.0)  # a 429 at 0 said: retry after 2 s
    assert window.ready_in(1.0, 0.0) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        RateWindow(0.0, 1.0, now=0.0)


def test_a_crowded_windows_429_pauses_the_key_for_its_slack_and_cuts_a_tenth() -> None:
    """A 429 under a known limit whose retry-after is no longer than the window: a
    window crowded by a send delayed on its way. The key pauses for the window's slack,
    the rate is cut to 0.9, the concurrency left alone; a longer retry-after (a quota, an
    overload) pauses it whole and cuts to 0.7."""
    assert crowded_pause(1.0, 1.0) == pytest.approx(1.0 - FILL)
    assert crowded_pause(0.01, 1.0) == 0.01
    assert crowded_pause(5.0, 1.0) == 5.0
    pacer = RatePacer(RateLimit(requests_per_minute=1200), 0.0)
    pacer.take(need_of(0, 0), 0.0)
    pacer.throttled(RateReading(retry_after=1.0), 0.0)
    assert pacer.paused_until == pytest.approx(1.0 - FILL)
    limit = pacer.limit
    assert limit is not None and limit.requests_per_minute == pytest.approx(1200 * CROWDED)
    assert pacer.concurrency(64) == 64
    pacer.throttled(RateReading(retry_after=5.0), 0.0)
    assert pacer.paused_until == pytest.approx(5.0)
    limit = pacer.limit
    assert limit is not None and limit.requests_per_minute == pytest.approx(1200 * 0.9 * 0.7)
    assert pacer.concurrency(64) < 64
