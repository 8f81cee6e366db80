"""Durable runs: what a run keeps in the store so that it can be resumed.

options       `Durable` (a durable run's store and policy), `Approve`, `Deny`,
              `Decision`: durable runs and tool approval

May import the base, observers (a pending approval is a report) and the stores.
"""

from .options import ApprovalHandler, Approve, Decision, Decisions, Deny, Durable

__all__ = ["ApprovalHandler", "Approve", "Decision", "Decisions", "Deny", "Durable"]
