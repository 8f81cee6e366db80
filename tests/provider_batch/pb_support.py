"""What the provider-batch tests share: the script (a tool round: two trips an item),
models of the batch APIs on a simulator (Bedrock's with its records in moto's S3), how
to count what was sent and how to read a job's ledger."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import raygent
from raygent import (
    AnthropicModel,
    BedrockModel,
    GeminiModel,
    OpenAIModel,
    OpenAIResponsesModel,
    Pricing,
)
from raygent.models import BedrockBatch
from raygent.sim import Match, Reply, Rule, SimStats, ToolCallReply
from raygent.sim._bedrock_auth import TEST_CREDENTIALS

APIS = ("chat", "responses", "anthropic")
PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)
# Gathered long enough for 2,000 runs' trips to make one batch; QUICK for a few runs.
FAST = raygent.ProviderBatch(gather_seconds=1.0, poll_seconds=0.05)
QUICK = raygent.ProviderBatch(gather_seconds=0.1, poll_seconds=0.02)

FLASH = "gemini-2.5-flash"
CLAUDE_ON_BEDROCK = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
ROLE = "arn:aws:iam::123456789012:role/raygent-batch"

TOOL_ROUND = [
    Rule(match=Match(after_tool_result=True), reply=Reply(text="answered")),
    Rule(reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": "x"})])),
]

_buckets = itertools.count()


@raygent.tool
def lookup(q: str) -> str:
    """Look a question up."""
    return "found " + q


def places(sim: Any, s3: str | None = None, bucket: str | None = None) -> dict[str, str]:
    """Where a model of each wire finds the simulator (and, for Bedrock's jobs, the S3
    server and bucket of their records): what `model_at` takes, and what a driver of
    its own is given (as JSON) to build the same model."""
    urls = {  # read as found: a stand-in for the simulator may have some of them only
        "url": "url",
        "chat": "openai_base_url",
        "responses": "openai_base_url",
        "anthropic": "anthropic_base_url",
        "gemini": "gemini_base_url",
    }
    found = {key: getattr(sim, name) for key, name in urls.items() if hasattr(sim, name)}
    if s3 is not None and bucket is not None:
        found.update(s3=s3, bucket=bucket)
    return found


def model_at(api: str, where: dict[str, str], **settings: Any) -> Any:
    """A model of `api` ("chat", "responses", "anthropic", "gemini", "bedrock") on the
    simulator at `where` (see `places`)."""
    if api == "gemini":
        settings.setdefault("api_key", "gemini-test")
        return GeminiModel(FLASH, base_url=where["gemini"], **settings)
    if api == "bedrock":
        return bedrock_model(where["url"], where["s3"], where["bucket"], **settings)
    settings.setdefault("pricing", PRICING)
    settings.setdefault("api_key", "sk-test")
    if api == "chat":
        return OpenAIModel("gpt-4o-mini", base_url=where["chat"], **settings)
    if api == "responses":
        return OpenAIResponsesModel("gpt-4o-mini", base_url=where["responses"], **settings)
    return AnthropicModel("claude-sonnet-4-5", base_url=where["anthropic"], **settings)


def model_for(api: str, sim: Any, **settings: Any) -> Any:
    """A model of `api` on `sim` (not Bedrock, whose jobs need S3: `model_at`)."""
    return model_at(api, places(sim), **settings)


def bedrock_model(
    url: str, s3: str, bucket: str, model_id: str = CLAUDE_ON_BEDROCK, **settings: Any
) -> BedrockModel:
    """A Bedrock model on the simulator at `url`, its jobs' records in `bucket` of the S3
    server at `s3`, signed with the simulator's test credentials."""
    batch = BedrockBatch(
        s3_uri=f"s3://{bucket}/jobs", role_arn=ROLE, endpoint_url=url, s3_endpoint_url=s3
    )
    return BedrockModel(
        model_id,
        region="us-east-1",
        base_url=url,
        access_key=TEST_CREDENTIALS.access_key,
        secret_key=TEST_CREDENTIALS.secret_key,
        batch=batch,
        **settings,
    )


def new_bucket(s3: str) -> str:
    """A bucket of its own on the S3 server at `s3`: its name."""
    import boto3

    client = boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url=s3,
        aws_access_key_id=TEST_CREDENTIALS.access_key,
        aws_secret_access_key=TEST_CREDENTIALS.secret_key,
    )
    name = f"rg-bedrock-batch-{next(_buckets)}"
    try:
        client.create_bucket(Bucket=name)
    finally:
        client.close()
    return name


def online_requests(stats: SimStats) -> int:
    """Requests to the online endpoints (the batch APIs' own calls left out)."""
    return stats.requests - stats.batch_calls


def is_create(request: Any) -> bool:
    """Whether a request the simulator received makes a batch, on any wire: OpenAI's
    and Anthropic's batches, the Gemini API's `:batchGenerateContent`, Bedrock's
    `CreateModelInvocationJob`."""
    if request.method != "POST":
        return False
    path = request.path
    return path in (
        "/v1/batches",
        "/v1/messages/batches",
        "/model-invocation-job",
    ) or path.endswith(":batchGenerateContent")


def creates(requests: Iterable[Any]) -> list[Any]:
    return [r for r in requests if is_create(r)]


def ledger_records(ledger: Path) -> list[dict[str, Any]]:
    """The whole records of a job's ledger (`<sink>.provider-batches/`) so far."""
    log = ledger / "batches.jsonl"
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # being written
    return out


def ledger_count(ledger: Path, kind: str) -> int:
    """How many records of `kind` ("submit", "submitted", "ended") the ledger has."""
    return sum(1 for record in ledger_records(ledger) if kind in record)
