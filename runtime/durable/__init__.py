"""Durable runs: what a run keeps in the store so that it can be resumed, one skeleton
for agents, flows and batch.

options       `Durable` (a durable run's store and policy), `Approve`, `Deny`,
              `Decision`: durable runs and tool approval
journal       `RunJournal`: a run's record in the run store (a header, an entry after
              every settled step, an outcome), fenced by its epoch; the claim a resume
              takes; `load`, `is_stored`, `encoded`
scope         `scope_of`: the scope a session or a run lives under (`run_scope`: a run's,
              its tenant named by the run options)

What a header, an entry and an outcome hold is the user's: agents (`agents._journal`)
and flows (`flows._durable`) configure the journal; batch names its items' runs so that
an attempt resumes them (`_batch.durable`).

May import the base, observers (a pending approval is a report) and the stores; nothing
above it.
"""

from .options import ApprovalHandler, Approve, Decision, Decisions, Deny, Durable

__all__ = ["ApprovalHandler", "Approve", "Decision", "Decisions", "Deny", "Durable"]
