"""provider_batch= on Ray: the lines the runners' runs send reach the job's pool in the
driver (one process polls the provider for the whole job), and their replies go back.

Lines come in the runners' result streams, a batch at a time; the replies that arrive
within `REPLY_INTERVAL` of each other go back to a runner in one `answer` call. Nothing
crosses Ray per line.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from raygent.backend import ProviderBatchPool

__all__ = ["LineRelay"]

# Replies to lines that come within this many seconds go back to a runner in one call.
REPLY_INTERVAL = 0.02


class LineRelay:
    """Between the runners and the job's pool (`raygent._batch.provider.pool.LinePool`)."""

    def __init__(self, pool: ProviderBatchPool | None) -> None:
        self._pool = pool
        if pool is not None:
            pool.keep_answers = True  # a runner that dies: its items' runs ask again
        self._replies: dict[str, tuple[Any, list[Any]]] = {}  # share -> (runner, replies)
        self._waiting: set[asyncio.Future[Any]] = set()

    def take(self, handle: Any, share: str, relayed: Any) -> None:
        """A runner's lines (custom_id, model, the line's bytes) and the spend it
        counted since."""
        lines, spend = relayed
        pool = self._pool
        if pool is None:  # a runner relays lines only when the job has a pool
            raise RuntimeError("lines relayed by a job with no provider_batch=")
        pool.add_spend(spend)
        routes: dict[int, Any] = {}  # a payload's lines share their model object
        for custom_id, model, line in lines:
            route = routes.get(id(model))
            if route is None:
                route = routes[id(model)] = pool.route(model)
            future = pool.line_future(model, route, custom_id, line)
            self._waiting.add(future)
            future.add_done_callback(functools.partial(self._answered, handle, share, custom_id))

    def _answered(self, handle: Any, share: str, custom_id: str, future: Any) -> None:
        self._waiting.discard(future)
        if future.cancelled():
            return
        result, batch_id = future.result()
        _, replies = self._replies.setdefault(share, (handle, []))
        replies.append((custom_id, result, batch_id))
        if len(replies) == 1:  # the first of a batch of replies: send them soon
            asyncio.get_running_loop().call_later(REPLY_INTERVAL, self._reply, share)

    def _reply(self, share: str) -> None:
        handle, replies = self._replies.pop(share, (None, []))
        if replies:
            handle.answer.remote(share, replies)

    def close(self) -> None:
        for future in list(self._waiting):
            future.cancel()
