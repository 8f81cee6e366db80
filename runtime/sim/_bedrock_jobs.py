"""Bedrock batch inference's control plane, which moto does not implement: model
invocation jobs (``CreateModelInvocationJob``, ``GetModelInvocationJob``,
``ListModelInvocationJobs``, ``StopModelInvocationJob``), run for real.

The split with moto: moto (in server mode) serves S3; the simulator serves the Bedrock
control plane itself and reads and writes the job's S3 objects through botocore's S3
client (``serve(s3_endpoint_url=...)``, else botocore's own configuration). A job goes
``Submitted`` → ``Validating`` (reads every ``*.jsonl`` under the input URI, a file or a
folder; a line that is not a ``{"recordId", "modelInput"}`` object, or fewer than
:data:`MIN_RECORDS` records in all, fails the job with Bedrock's message) →
``Scheduled`` → ``InProgress`` (each record answered as the online endpoint would answer
it unstreamed: ``Converse`` jobs by the Converse wire, ``InvokeModel`` jobs of Anthropic
Claude models by the Messages wire; other families' InvokeModel records are error
lines) → ``Completed``, ``PartiallyCompleted`` (some records erred) or ``Failed`` (all
did); ``StopModelInvocationJob`` → ``Stopping`` → ``Stopped``; the server's
``batch_expire_after`` → ``Expired``. Whatever was answered is written: for each input
file ``{output}/{jobId}/{file}.out`` (one ``modelOutput`` or ``error`` line per record,
in a seeded order, as Bedrock does not keep the input's) and
``{output}/{jobId}/manifest.json.out``.
"""

from __future__ import annotations

import asyncio
import random
import re
import secrets
import string
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import unquote

from aiohttp import web
from pydantic_core import from_json, to_json

from ._anthropic_messages import AnthropicWire
from ._batch_common import BatchTimer, Core, LineClock
from ._bedrock_auth import TEST_CREDENTIALS, AuthRefusal, authenticate
from ._bedrock_converse import BedrockWire, error_type
from ._bedrock_runtime import ERROR_TYPE_HEADER
from ._stats import RecordedRequest, redact_headers

MIN_RECORDS = 100  # Bedrock's "Minimum number of records per batch inference job"
_ACCOUNT = "123456789012"
_NAME = re.compile(r"^[a-zA-Z0-9]{1,63}(-*[a-zA-Z0-9\+\-\.]){0,63}$")
_ROLE = re.compile(r"^arn:aws(-[^:]+)?:iam::([0-9]{12})?:role/.+$")
_ENDED = frozenset({"Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"})
_STOPPABLE = frozenset({"Submitted", "Validating", "Scheduled", "InProgress"})
_ANTHROPIC = AnthropicWire()


@dataclass(slots=True)
class _Job:
    arn: str
    job_id: str
    request: dict[str, Any]
    submitted: datetime
    status: str = "Submitted"
    message: str | None = None
    modified: datetime | None = None
    ended: datetime | None = None
    counts: dict[str, int] = field(default_factory=dict)
    clock: LineClock | None = None
    task: asyncio.Task[None] | None = None
    stopping: bool = False  # StopModelInvocationJob was called

    def stopped(self) -> bool:
        """Whether a stop was asked for (the job then ends Stopped)."""
        if self.stopping:
            self.set("Stopped")
        return self.stopping

    def set(self, status: str, message: str | None = None) -> None:
        self.status = status
        self.message = message if message is not None else self.message
        self.modified = datetime.now(timezone.utc)
        if status in _ENDED:
            self.ended = self.modified

    def describe(self) -> dict[str, Any]:
        r = self.request
        hours = int(r.get("timeoutDurationInHours") or 24)
        out: dict[str, Any] = {
            "jobArn": self.arn,
            "jobName": r["jobName"],
            "modelId": r["modelId"],
            "roleArn": r["roleArn"],
            "status": self.status,
            "submitTime": _stamp(self.submitted),
            "lastModifiedTime": _stamp(self.modified or self.submitted),
            "inputDataConfig": r["inputDataConfig"],
            "outputDataConfig": r["outputDataConfig"],
            "timeoutDurationInHours": hours,
            "jobExpirationTime": _stamp(self.submitted + timedelta(hours=hours)),
            "modelInvocationType": r.get("modelInvocationType") or "InvokeModel",
        }
        if "clientRequestToken" in r:
            out["clientRequestToken"] = r["clientRequestToken"]
        if self.message is not None:
            out["message"] = self.message
        if self.ended is not None:
            out["endTime"] = _stamp(self.ended)
        for key in ("total", "processed", "success", "error"):
            out[f"{key}RecordCount"] = self.counts.get(key, 0)
        return out


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _split(uri: str) -> tuple[str, str]:
    """(bucket, key or prefix) of an ``s3://`` URI."""
    rest = uri[len("s3://") :]
    bucket, _, key = rest.partition("/")
    return bucket, key


class BedrockJobs:
    """The model invocation jobs of one simulator."""

    def __init__(self, core: Core, timing: BatchTimer, s3_endpoint_url: str | None = None) -> None:
        self.core = core
        self.timing = timing
        self.s3_endpoint_url = s3_endpoint_url
        self.jobs: dict[str, _Job] = {}
        self._tokens: dict[str, str] = {}
        self._s3: Any = None

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/model-invocation-job", self._call(self._create))
        app.router.add_get("/model-invocation-jobs", self._call(self._list))
        app.router.add_get("/model-invocation-job/{job:.+}", self._call(self._get))
        app.router.add_post("/model-invocation-job/{job:.+}/stop", self._call(self._stop))

    def cancel_all(self) -> None:
        for job in self.jobs.values():
            if job.task is not None:
                job.task.cancel()

    def _call(self, run: Any) -> Any:
        async def handle(request: web.Request) -> web.Response:
            rid = self.core.next_request_id()
            raw = await request.read()
            headers = redact_headers(request.headers)
            record = RecordedRequest("bedrock_batch", request.method, request.path, headers, None)
            self.core.stats.received(record, batch_call=True)
            signed = authenticate(
                request.method, request.host, request.raw_path, request.headers, raw
            )
            if isinstance(signed, AuthRefusal):
                resp = _error(signed.status, signed.message, signed.error_type)
            else:
                resp = await run(request, raw, signed.region or "us-east-1")
            resp.headers["x-amzn-RequestId"] = rid
            self.core.stats.finished(resp.status)
            return resp

        return handle

    def _job(self, request: web.Request) -> _Job | None:
        ident = unquote(request.match_info["job"])
        return self.jobs.get(ident.rsplit("/", 1)[-1])

    async def _create(self, request: web.Request, raw: bytes, region: str) -> web.Response:
        try:
            body = from_json(raw) if raw else None
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _error(400, "Malformed input request, please reformat your input and try again.")
        problem = _invalid(body)
        if problem is not None:
            return _error(400, problem)
        token = body.get("clientRequestToken")
        if token is not None and token in self._tokens:
            return _json({"jobArn": self._tokens[token]})
        if any(j.request["jobName"] == body["jobName"] for j in self.jobs.values()):
            return _error(409, f"A job with the name {body['jobName']} already exists.")
        job_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(12))
        arn = f"arn:aws:bedrock:{region}:{_ACCOUNT}:model-invocation-job/{job_id}"
        job = _Job(arn, job_id, body, datetime.now(timezone.utc))
        self.jobs[job_id] = job
        if token is not None:
            self._tokens[token] = arn
        job.task = asyncio.get_running_loop().create_task(self._run(job))
        return _json({"jobArn": arn})

    async def _get(self, request: web.Request, raw: bytes, region: str) -> web.Response:
        job = self._job(request)
        return _not_found(request) if job is None else _json(job.describe())

    async def _list(self, request: web.Request, raw: bytes, region: str) -> web.Response:
        q = request.query
        jobs = sorted(self.jobs.values(), key=lambda j: j.submitted)
        if q.get("sortOrder", "Descending") == "Descending":
            jobs.reverse()
        if "statusEquals" in q:
            jobs = [j for j in jobs if j.status == q["statusEquals"]]
        if "nameContains" in q:
            jobs = [j for j in jobs if q["nameContains"] in j.request["jobName"]]
        try:
            start = int(q.get("nextToken", "0"))
            size = int(q.get("maxResults", "1000"))
        except ValueError:
            return _error(400, "nextToken and maxResults must be integers.")
        if not 1 <= size <= 1000:
            return _error(400, "maxResults must be between 1 and 1000.")
        page = jobs[start : start + size]
        out: dict[str, Any] = {"invocationJobSummaries": [j.describe() for j in page]}
        if start + size < len(jobs):
            out["nextToken"] = str(start + size)
        return _json(out)

    async def _stop(self, request: web.Request, raw: bytes, region: str) -> web.Response:
        job = self._job(request)
        if job is None:
            return _not_found(request)
        if job.status not in _STOPPABLE:
            return _error(409, f"The job cannot be stopped: its status is {job.status}.")
        job.set("Stopping")
        job.stopping = True
        if job.clock is not None:
            job.clock.cancel()
        return _json({})

    async def _run(self, job: _Job) -> None:
        try:
            await self._process(job)
        except Exception as exc:  # an S3 failure or a bug: the job fails, as Bedrock's would
            job.set("Failed", f"Internal error while processing the job: {exc}")

    async def _process(self, job: _Job) -> None:
        await asyncio.sleep(0)
        if job.stopped():
            return
        job.set("Validating")
        files = await asyncio.to_thread(self._read_input, job)
        if job.stopped():
            return
        if isinstance(files, str):
            job.set("Failed", files)
            return
        total = sum(len(records) for _, records in files)
        job.counts["total"] = total
        if total < MIN_RECORDS:
            job.set(
                "Failed",
                f"The number of records in the input ({total}) is below the minimum number "
                f"of records per batch inference job for this model ({MIN_RECORDS}).",
            )
            return
        job.set("Scheduled")
        job.set("InProgress")
        clock = job.clock = LineClock(self.timing.draw("bedrock"), total)
        if job.stopping:
            clock.cancel()
        outputs: list[tuple[str, list[bytes]]] = []
        index = 0
        for key, records in files:
            lines: list[bytes] = []
            outputs.append((key, lines))
            for record in records:
                if await clock.next_line(index) != "answer":
                    break
                lines.append(self._answer(job, record))
                index += 1
        await asyncio.to_thread(self._write_output, job, outputs)
        if job.stopped():
            return
        if index < total:
            job.set("Expired", "The job expired before all its records were processed.")
        elif job.counts.get("error", 0) == total:
            job.set("Failed", "Every record of the job failed.")
        elif job.counts.get("error", 0):
            job.set("PartiallyCompleted")
        else:
            job.set("Completed")

    def _answer(self, job: _Job, record: dict[str, Any]) -> bytes:
        """A record's output line, answered as the online endpoint would answer it."""
        model = job.request["modelId"]
        given = record["modelInput"]
        if job.request.get("modelInvocationType") == "Converse":
            answer = self.core.answer_json(BedrockWire(model), given)
        elif "anthropic.claude" in model:
            params = {k: v for k, v in given.items() if k != "anthropic_version"}
            answer = self.core.answer_json(_ANTHROPIC, {**params, "model": model})
        else:
            answer = None
        self.core.stats.batch_line()
        job.counts["processed"] = job.counts.get("processed", 0) + 1
        line: dict[str, Any] = {"recordId": record["recordId"], "modelInput": given}
        if answer is not None and answer.status == 200 and answer.body is not None:
            line["modelOutput"] = from_json(answer.body)
            job.counts["success"] = job.counts.get("success", 0) + 1
        else:
            line["error"] = _line_error(answer)
            job.counts["error"] = job.counts.get("error", 0) + 1
        return to_json(line)

    def _client(self) -> Any:
        if self._s3 is None:
            import botocore.session  # the test extra; only a batch job needs it

            self._s3 = botocore.session.get_session().create_client(
                "s3",
                region_name="us-east-1",
                endpoint_url=self.s3_endpoint_url,
                aws_access_key_id=TEST_CREDENTIALS.access_key,
                aws_secret_access_key=TEST_CREDENTIALS.secret_key,
            )
        return self._s3

    def _read_input(self, job: _Job) -> list[tuple[str, list[dict[str, Any]]]] | str:
        """Each input file's records, or why the job fails."""
        s3 = self._client()
        uri = job.request["inputDataConfig"]["s3InputDataConfig"]["s3Uri"]
        bucket, prefix = _split(uri)
        try:
            if prefix.endswith(".jsonl"):
                keys = [prefix]
            else:
                listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
                keys = [o["Key"] for o in listed.get("Contents", []) if o["Key"].endswith(".jsonl")]
            files = [(key, s3.get_object(Bucket=bucket, Key=key)["Body"].read()) for key in keys]
        except Exception as exc:  # botocore's ClientError: no such bucket, key, access
            return f"Unable to read the input data at {uri}: {exc}"
        if not files:
            return f"No .jsonl files found at {uri}."
        out = []
        for key, data in files:
            records = []
            for n, line in enumerate(data.splitlines(), 1):
                if not line.strip():
                    continue
                record = _record(line, n)
                if record is None:
                    return (
                        f"Invalid record at line {n} of s3://{bucket}/{key}: a line must be "
                        "a JSON object with a modelInput object."
                    )
                records.append(record)
            out.append((key, records))
        return out

    def _write_output(self, job: _Job, outputs: list[tuple[str, list[bytes]]]) -> None:
        s3 = self._client()
        bucket, prefix = _split(job.request["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"])
        folder = f"{prefix.rstrip('/')}/{job.job_id}/" if prefix.strip("/") else f"{job.job_id}/"
        rng = random.Random(self.core.config.seed)
        for key, lines in outputs:
            lines = list(lines)
            rng.shuffle(lines)  # Bedrock does not keep the input's order
            name = key.rsplit("/", 1)[-1] + ".out"
            s3.put_object(Bucket=bucket, Key=folder + name, Body=b"".join(x + b"\n" for x in lines))
        manifest = {
            "totalRecordCount": job.counts.get("total", 0),
            "processedRecordCount": job.counts.get("processed", 0),
            "successRecordCount": job.counts.get("success", 0),
            "errorRecordCount": job.counts.get("error", 0),
            "inputTokenCount": 0,
            "outputTokenCount": 0,
        }
        for _, lines in outputs:
            for line in lines:
                usage = from_json(line).get("modelOutput", {}).get("usage", {})
                manifest["inputTokenCount"] += int(
                    usage.get("inputTokens") or usage.get("input_tokens") or 0
                )
                manifest["outputTokenCount"] += int(
                    usage.get("outputTokens") or usage.get("output_tokens") or 0
                )
        s3.put_object(Bucket=bucket, Key=folder + "manifest.json.out", Body=to_json(manifest))


def _record(line: bytes, n: int) -> dict[str, Any] | None:
    try:
        record = from_json(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("modelInput"), dict):
        return None
    if not isinstance(record.get("recordId"), str):  # Bedrock names a record that has none
        record["recordId"] = f"{n:011d}"
    return record


def _line_error(answer: Any) -> dict[str, Any]:
    if answer is None:
        return {
            "errorCode": 400,
            "errorMessage": "The simulator answers InvokeModel records of Anthropic Claude "
            "models only; use the Converse invocation type for other models.",
        }
    message = "The model returned no answer."
    if answer.body is not None:
        try:
            body = from_json(answer.body)
        except ValueError:
            body = {}
        error = body.get("error") if isinstance(body.get("error"), dict) else body
        message = str(error.get("message") or message)
    return {"errorCode": answer.status, "errorMessage": message}


def _invalid(body: dict[str, Any]) -> str | None:
    """Bedrock's validation of a CreateModelInvocationJob body (None: valid)."""
    for key in ("jobName", "roleArn", "modelId", "inputDataConfig", "outputDataConfig"):
        if key not in body:
            return (
                f"1 validation error detected: Value null at '{key}' failed to satisfy "
                "constraint: Member must not be null"
            )
    if not isinstance(body["jobName"], str) or not _NAME.match(body["jobName"]):
        return "jobName must match ^[a-zA-Z0-9]{1,63}(-*[a-zA-Z0-9\\+\\-\\.]){0,63}$."
    if not isinstance(body["roleArn"], str) or not _ROLE.match(body["roleArn"]):
        return "roleArn must be the ARN of an IAM role."
    for side, name in (
        ("inputDataConfig", "s3InputDataConfig"),
        ("outputDataConfig", "s3OutputDataConfig"),
    ):
        config = body[side].get(name) if isinstance(body[side], dict) else None
        uri = config.get("s3Uri") if isinstance(config, dict) else None
        if not isinstance(uri, str) or not uri.startswith("s3://") or len(uri) < 6:
            return f"{side}.{name}.s3Uri must be an s3:// URI."
    kind = body.get("modelInvocationType")
    if kind not in (None, "InvokeModel", "Converse"):
        return "modelInvocationType must be InvokeModel or Converse."
    hours = body.get("timeoutDurationInHours")
    if hours is not None and (not isinstance(hours, int) or not 24 <= hours <= 168):
        return "timeoutDurationInHours must be between 24 and 168."
    return None


def _json(body: dict[str, Any]) -> web.Response:
    return web.Response(status=200, body=to_json(body), content_type="application/json")


def _error(status: int, message: str, kind: str | None = None) -> web.Response:
    kind = kind or ("ConflictException" if status == 409 else error_type(status))
    resp = web.Response(
        status=status, body=to_json({"message": message}), content_type="application/json"
    )
    resp.headers[ERROR_TYPE_HEADER] = kind
    return resp


def _not_found(request: web.Request) -> web.Response:
    return _error(404, f"The specified job {unquote(request.match_info['job'])} was not found.")
