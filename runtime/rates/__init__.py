"""Rate limits as providers count them: requests and tokens per minute, input and output
apart, paced smoothly and learnt from the replies.

limits    `RateLimit` (what is configured), `RateReading` and `Window` (what a reply's
          headers say), `read_rate_headers` (part of the base: the model contract
          carries a reading)
estimate  what a request counts before it is sent (prompt estimate plus `max_tokens`)
bucket    `Bucket`: one dimension, refilled continuously, reserve then settle (debt allowed)
learner   `RateLearner`: additive increase, multiplicative decrease, from headers, 429s
          and latency
window    `RateWindow`: one dimension paced so that no window of the limit's `burst`
          seconds carries more than its share (sends spaced at `FILL` of the rate)
pacer     `RatePacer`: one key's windows under its configured and learnt limits

Pure: no asyncio, no clock (time is given). The local backend's model access holds a
pacer per key and loop; the Ray backend's holders reuse them (through `raygent.backend`).
May import the base only (the budgets' worst case counts a prompt with `estimate`).
"""

from .bucket import Bucket
from .estimate import CHARS_PER_TOKEN, DEFAULT_OUTPUT_RESERVE, estimate, output_cap, prompt_tokens
from .learner import RateLearner, SendMeter
from .limits import (
    RateLimit,
    RateReading,
    Window,
    rate_headers,
    read_rate_headers,
    retry_after,
)
from .pacer import DEFAULT_PAUSE, Need, RatePacer, need_of
from .window import FILL, RateWindow, crowded_pause

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_OUTPUT_RESERVE",
    "DEFAULT_PAUSE",
    "FILL",
    "Bucket",
    "Need",
    "RateLearner",
    "RateLimit",
    "RatePacer",
    "RateReading",
    "RateWindow",
    "SendMeter",
    "Window",
    "crowded_pause",
    "estimate",
    "need_of",
    "output_cap",
    "prompt_tokens",
    "rate_headers",
    "read_rate_headers",
    "retry_after",
]
