"""Bedrock's batch inference as a provider batch API: model invocation jobs.

A batch is one job: its lines, each `{"recordId", "modelInput"}` (the Converse body of
the online request, no tier), are put in S3 as one JSONL object under the job's own
folder of `BedrockBatch.s3_uri`; `CreateModelInvocationJob` (a Converse job, its name
and its idempotency token the batch's tag, the IAM role `role_arn`) starts it;
`GetModelInvocationJob` is polled; at its end the `*.jsonl.out` objects of its output
folder are read (each line the record's `modelOutput` or its `error`) with its
`manifest.json.out` (the counts), and each line is handed back under the `custom_id`
its record stands for. A record id is the line's `custom_id` made alphanumeric (`-` as
`X`: raygent's ids are lowercase hex, digits and `-`), so no map is kept anywhere.

States: `Submitted`, `Validating`, `Scheduled`, `InProgress`, `Stopping` are out;
`Completed`, `PartiallyCompleted` ended with results; `Failed` with no record
processed is the job refused (every line fails with its message), with some processed
its results are read; `Expired` and `Stopped` are read too, the records they did not
answer are `expired` and `cancelled` lines (`ProviderBatch.on_expired` says what they
become). A job takes at least `MIN_RECORDS` records: the pool gathers that many, or
sends the lines online with a note (`min_lines`).

S3 goes through botocore's S3 client (its own signing and endpoint rules:
`s3_endpoint_url=`, else `AWS_ENDPOINT_URL_S3`), run in a thread; the control plane
through the model's signed HTTP (`endpoint_url=`, else `AWS_ENDPOINT_URL_BEDROCK`, else
the region's `bedrock` endpoint).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote

import pydantic_core

from ..errors import InvalidOptionsError, ProviderBatchError, ServerError
from ._aws import endpoint_url
from ._batch_wire import BatchState, LineResult
from .batch_api import cancel_batch


class BatchingModel(Protocol):
    """What the jobs need of their model (`BedrockModel`)."""

    name: str
    region: str

    def line_error(self, status: int, body: Any, request_id: str | None = None) -> Any: ...

    def aws_client(self, service: str, endpoint: str | None = None) -> Any: ...


__all__ = ["ENDED", "MIN_RECORDS", "BedrockBatch", "BedrockBatchAPI", "custom_id_of", "record_id"]

logger = logging.getLogger(__name__)

MIN_RECORDS = 100  # Bedrock's "Minimum number of records per batch inference job"
ENDED = frozenset({"Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"})
_UNANSWERED = {"Expired": "expired", "Stopped": "cancelled"}
_ROLE = re.compile(r"^arn:aws(-[^:]+)?:iam::\d{12}:role/.+$")
_JOBS = "/model-invocation-job"


@dataclass(frozen=True, slots=True)
class BedrockBatch:
    """Where a Bedrock model's batch inference jobs keep their records: `s3_uri`
    (`s3://bucket/prefix`: each job writes its input and output under its own folder
    there), `role_arn` (the IAM role Bedrock assumes to read and write it: trusted by
    `bedrock.amazonaws.com`, with `s3:GetObject`, `s3:PutObject` and `s3:ListBucket` on
    the bucket), `endpoint_url` (the control plane's, default the region's),
    `s3_endpoint_url` (default botocore's) and `timeout_hours` (24 to 168)."""

    s3_uri: str
    role_arn: str
    endpoint_url: str | None = None
    s3_endpoint_url: str | None = None
    timeout_hours: int = 24

    def __post_init__(self) -> None:
        if not self.s3_uri.startswith("s3://") or len(self.s3_uri.rstrip("/")) <= 5:
            raise InvalidOptionsError(
                f"BedrockBatch.s3_uri must be s3://bucket/..., not {self.s3_uri!r}"
            )
        if not _ROLE.match(self.role_arn):
            raise InvalidOptionsError(
                f"BedrockBatch.role_arn must be an IAM role's ARN, not {self.role_arn!r}"
            )
        if not 24 <= self.timeout_hours <= 168:
            raise InvalidOptionsError("BedrockBatch.timeout_hours must be between 24 and 168")

    @property
    def bucket(self) -> str:
        return self.s3_uri[5:].split("/", 1)[0]

    @property
    def prefix(self) -> str:
        """The key prefix of the jobs' folders ("" or ending in "/")."""
        rest = self.s3_uri[5:].partition("/")[2].strip("/")
        return rest + "/" if rest else ""


def record_id(custom_id: str) -> str:
    """A line's record id: its `custom_id`, alphanumeric (reversible: `custom_id_of`)."""
    made = custom_id.replace("-", "X")
    if not made.isalnum() or made.count("X") != custom_id.count("-"):
        raise ValueError(f"a custom_id Bedrock cannot carry as a record id: {custom_id!r}")
    return made


def custom_id_of(record: str) -> str:
    return record.replace("X", "-")


def _stamp(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _job_id(arn: str) -> str:
    """A job's id, the last part of its ARN: what a batch is known by (a file name in
    the job's ledger; the control plane takes it for the ARN, in the model's region)."""
    return arn.rsplit("/", 1)[-1]


def _split(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[5:].partition("/")
    return bucket, key


class BedrockBatchAPI:
    """Model invocation jobs for one model's lines (see the module's docstring)."""

    provider = "bedrock"
    endpoint = _JOBS
    max_lines = 50_000  # "Records per batch inference job"
    max_bytes = 1024 * 1024 * 1024  # "Batch inference input file size" (1 GB)
    min_lines = MIN_RECORDS

    def __init__(self, model: BatchingModel, config: BedrockBatch) -> None:
        self.model = model
        self.config = config
        control: Any = copy.copy(model)  # the same credentials, signed for `bedrock` too
        control.base_url = (config.endpoint_url or endpoint_url(model.region, "bedrock")).rstrip(
            "/"
        )
        control._urls = {}
        control.__dict__.pop("_remote", None)  # cached for the runtime's URL
        self._control = control
        self._s3: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_s3"] = None  # botocore's client stays in its process
        return state

    # -- lines --------------------------------------------------------------------

    def encode(self, custom_id: str, body: bytes) -> bytes:
        return (
            b'{"recordId":'
            + pydantic_core.to_json(record_id(custom_id))
            + b',"modelInput":'
            + body
            + b"}"
        )

    def read_line(self, line: bytes) -> LineResult:
        data = pydantic_core.from_json(line)
        if not isinstance(data, dict):
            raise ValueError("a batch output line that is not a JSON object")
        custom_id = str(data.get("custom_id"))
        outcome = data.get("outcome")
        if outcome in ("expired", "cancelled"):
            return LineResult(custom_id, outcome)
        output = data.get("modelOutput")
        if isinstance(output, dict):
            return LineResult(custom_id, "succeeded", body=output)
        given = data.get("error")
        error: dict[str, Any] = given if isinstance(given, dict) else {}
        code = error.get("errorCode")
        status = code if isinstance(code, int) and 400 <= code <= 599 else 500
        message = str(error.get("errorMessage") or "the record failed")
        return LineResult(
            custom_id, "errored", error=self.model.line_error(status, {"message": message})
        )

    # -- a job --------------------------------------------------------------------

    def _input_key(self, tag: str) -> str:
        return f"{self.config.prefix}{tag}/records.jsonl"

    def _client(self) -> Any:
        if self._s3 is None:
            self._s3 = self.model.aws_client("s3", self.config.s3_endpoint_url)
        return self._s3

    async def _s3_call(self, name: str, **kwargs: Any) -> Any:
        def call() -> Any:
            return getattr(self._client(), name)(**kwargs)

        try:
            return await asyncio.to_thread(call)
        except Exception as exc:  # botocore's ClientError, its connection errors
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            raise ServerError(
                f"bedrock batch: S3 {name} failed: {type(exc).__name__}: {exc}",
                provider=self.provider,
                provider_code=code,
            ) from None

    async def submit(self, lines: Sequence[bytes], tag: str) -> str:
        content = b"\n".join(lines) + b"\n"
        key = self._input_key(tag)
        await self._s3_call("put_object", Bucket=self.config.bucket, Key=key, Body=content)
        return await self._create(tag)

    async def _create(self, tag: str) -> str:
        bucket, prefix = self.config.bucket, self.config.prefix
        body = {
            "jobName": tag,
            "clientRequestToken": tag,  # made again after a lost reply: the same job
            "roleArn": self.config.role_arn,
            "modelId": self.model.name,
            "modelInvocationType": "Converse",
            "inputDataConfig": {
                "s3InputDataConfig": {"s3Uri": f"s3://{bucket}/{self._input_key(tag)}"}
            },
            "outputDataConfig": {
                "s3OutputDataConfig": {"s3Uri": f"s3://{bucket}/{prefix}{tag}/out/"}
            },
            "timeoutDurationInHours": self.config.timeout_hours,
        }
        created = await self._control._call_json("POST", _JOBS, body)
        return _job_id(str(created["jobArn"]))

    async def find(self, tag: str, since: float, lines: int) -> str | None:
        page = await self._control._call_json(
            "GET", f"/model-invocation-jobs?nameContains={quote(tag)}&maxResults=100"
        )
        for job in page.get("invocationJobSummaries") or []:
            if job.get("jobName") == tag:
                return _job_id(str(job["jobArn"]))
        try:  # put in S3, never made a job: made now (its token keeps it one job)
            await self._s3_call("head_object", Bucket=self.config.bucket, Key=self._input_key(tag))
        except ServerError:
            return None
        return await self._create(tag)

    async def state(self, batch_id: str) -> BatchState:
        data = await self._control._call_json("GET", f"{_JOBS}/{quote(batch_id, safe='')}")
        status = str(data.get("status"))
        failure = None
        if status == "Failed" and not data.get("processedRecordCount"):
            failure = ProviderBatchError(
                f"bedrock refused job {batch_id}: {data.get('message') or 'the job failed'}",
                provider=self.provider,
                batch_id=batch_id,
            )
        output = data.get("outputDataConfig", {}).get("s3OutputDataConfig", {}).get("s3Uri", "")
        given = data.get("inputDataConfig", {}).get("s3InputDataConfig", {}).get("s3Uri", "")
        return BatchState(
            id=batch_id,
            status=status,
            ended=status in ENDED,
            created_at=_stamp(data.get("submitTime")),
            ended_at=_stamp(data.get("endTime")),
            failure=failure,
            files=(str(output), str(given), batch_id),
        )

    async def results(self, state: BatchState) -> bytes:
        """The job's output lines, each under its `custom_id` (its `modelInput` left
        out), and a line for each record it did not answer when it expired or stopped."""
        output, given, job_id = state.files
        bucket, prefix = _split(output)
        folder = f"{prefix.rstrip('/')}/{job_id}/" if prefix.strip("/") else f"{job_id}/"
        listed = await self._s3_call("list_objects_v2", Bucket=bucket, Prefix=folder)
        keys = [o["Key"] for o in listed.get("Contents", [])]
        out: list[bytes] = []
        answered: set[str] = set()
        for key in keys:
            if not key.endswith(".jsonl.out"):
                continue
            got = await self._s3_call("get_object", Bucket=bucket, Key=key)
            for raw in got["Body"].read().splitlines():
                line = _output_line(raw)
                if line is not None:
                    answered.add(line[0])
                    out.append(line[1])
        manifest = await self._manifest(bucket, folder, keys)
        unanswered = _UNANSWERED.get(state.status)
        total = manifest.get("totalRecordCount")
        if unanswered is not None or (isinstance(total, int) and total > len(answered)):
            outcome = unanswered or "expired"
            for custom_id in await self._records(given):
                if custom_id not in answered:
                    out.append(pydantic_core.to_json({"custom_id": custom_id, "outcome": outcome}))
        return b"".join(line + b"\n" for line in out)

    async def _manifest(self, bucket: str, folder: str, keys: list[str]) -> dict[str, Any]:
        key = folder + "manifest.json.out"
        if key not in keys:
            return {}
        got = await self._s3_call("get_object", Bucket=bucket, Key=key)
        data = pydantic_core.from_json(got["Body"].read())
        logger.info("bedrock job %s: %s", folder.rstrip("/"), data)
        return data if isinstance(data, dict) else {}

    async def _records(self, given: str) -> list[str]:
        """The custom_ids of a job's input records (each line begins with its id)."""
        bucket, key = _split(given)
        got = await self._s3_call("get_object", Bucket=bucket, Key=key)
        ids = []
        for raw in got["Body"].read().splitlines():
            if raw.startswith(b'{"recordId":"'):
                ids.append(custom_id_of(raw[13 : raw.index(b'"', 13)].decode()))
        return ids

    async def cancel(self, batch_id: str) -> None:
        path = f"{_JOBS}/{quote(batch_id, safe='')}/stop"
        await cancel_batch(self, self._control, batch_id, path)


def _output_line(raw: bytes) -> tuple[str, bytes] | None:
    """An output line as the pool routes it: (its custom_id, the line under it)."""
    if not raw.strip():
        return None
    try:
        data = pydantic_core.from_json(raw)
    except ValueError:
        return None
    record = data.get("recordId") if isinstance(data, dict) else None
    if not isinstance(record, str):
        return None
    custom_id = custom_id_of(record)
    kept: dict[str, Any] = {"custom_id": custom_id}
    for field in ("modelOutput", "error"):
        if field in data:
            kept[field] = data[field]
    return custom_id, pydantic_core.to_json(kept)
