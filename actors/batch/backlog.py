"""A batch's backlog on Ray: per lane, the jobs the driver routed there and has not sent."""

from __future__ import annotations

from collections import deque

from raygent.backend import Job

__all__ = ["Backlogs"]


class Backlogs:
    """Per lane, the jobs routed to it and not sent yet (requeued ones first), with the
    counts the driver reads on every item kept as jobs come and go, not counted then."""

    def __init__(self) -> None:
        self.lanes: list[deque[Job]] = []
        self.held = 0  # jobs in every lane
        self.requeued = 0  # of which came back from a runner that died: they retry

    def add_lane(self) -> None:
        self.lanes.append(deque())

    def route(self, lane: int, job: Job) -> None:
        self.lanes[lane].append(job)
        self.held += 1

    def requeue(self, lane: int, jobs: list[Job]) -> None:
        """First in the lane again, in the order they were sent: a session's items keep
        their order on the runner that takes the lane over."""
        self.lanes[lane].extendleft(reversed(jobs))
        self.held += len(jobs)
        self.requeued += len(jobs)

    def pop(self, lane: int) -> Job | None:
        queue = self.lanes[lane]
        if not queue:
            return None
        job = queue.popleft()
        self.held -= 1
        if job.attempts:
            self.requeued -= 1
        return job

    def drain(self) -> list[Job]:
        jobs = [job for queue in self.lanes for job in queue]
        for queue in self.lanes:
            queue.clear()
        self.held = self.requeued = 0
        return jobs
