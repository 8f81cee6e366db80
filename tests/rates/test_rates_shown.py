"""What a rate limit that held a job back shows: the trip event observers get, and the
progress bar's postfix (the rate held, the 429s met, the time waited)."""

from __future__ import annotations

import io

import pytest
from rates_support import make_model

import raygent
from raygent import RateLimit
from raygent._batch.progress import Progress
from raygent.observers.events import TripCompleted
from raygent.sim import SimRateLimits, serve


async def test_the_trip_event_says_how_long_a_rate_limit_held_the_trip() -> None:
    seen: list[TripCompleted] = []
    async with serve(rate_limits=SimRateLimits(requests_per_minute=600)) as sim:
        model = make_model("openai", sim, rate_limit=RateLimit(requests_per_minute=540))
        bot = raygent.agent(model=model, on={"agent.trip.completed": seen.append})
        result = await raygent.batch(bot, [f"q{i}" for i in range(24)], concurrency=24)
    assert result.report.succeeded == 24
    assert len(seen) == 24
    # A burst of 9 for 24 requests at once: the later ones waited for the refill, and
    # each event says what its trip's report says.
    waited = [event.rate_wait for event in seen if event.rate_wait > 0]
    assert len(waited) >= 10
    trips = sorted(t.rate_wait for item in result.items for t in item.result.report.trips)
    assert sorted(event.rate_wait for event in seen) == trips
    assert all(event.throttled == 0 for event in seen)


def test_the_progress_bar_shows_the_rate_once_a_limit_held_the_job_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    monkeypatch.setattr("raygent._batch.progress._POSTFIX_EVERY", 0.0)
    progress = Progress(True, 4)
    progress._bar.fp = out  # tqdm's file, so the text can be read
    progress.update(0, 0, 0, (2, 0, 0.0))  # nothing held back: no rate part
    assert "req/min" not in progress._bar.postfix
    progress.update(0, 0, 0, (3, 2, 1.25))
    postfix = progress._bar.postfix
    assert "429s=2" in postfix and "rate wait=1.2s" in postfix and "req/min" in postfix
    progress.close(0, 0, 0)
