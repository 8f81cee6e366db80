"""Provider batches: a job's model trips sent through the providers' batch APIs (half
price), as lines of batches gathered across the job's runs.

options     `ProviderBatch` (how a job uses the providers' batch APIs), and what a
            result and report say of them (`ProviderBatchInfo`, `ProviderBatchSummary`)
job         a job's checks (`check_batchable`), its pool, and the lines set around each
            attempt (`with_lines`)
pool        `LinePool`: a job's lines, gathered, submitted, polled, routed back
late        a job with a deadline: its late batches cancelled, their lines sent online,
            what was paid twice; what the pool tells the job's route
trip_lines  each attempt's trips as lines (`ItemLines`, to the pool or a Ray runner's
            relay), and what they cost (`LineCost`)
log         `SubmissionLog`: what a job sent by provider batch, beside its sink, for a
            resume after a crash

Part of batch: may import what `raygent._batch` may (the base, the models' provider-batch
APIs, the seams (`seams.provider_lines`), budgets) and the batch's own sinks;
never agents or flows.
"""

from .options import ProviderBatch, ProviderBatchInfo, ProviderBatchSummary

__all__ = ["ProviderBatch", "ProviderBatchInfo", "ProviderBatchSummary"]
