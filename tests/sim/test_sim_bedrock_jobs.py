"""Bedrock batch inference against real servers: moto's S3 holds the records and the
outputs, the simulator runs the model invocation jobs (which moto does not), boto3's
`bedrock` and `s3` clients drive both."""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
import botocore.exceptions
import pytest
from bedrock_helpers import CLAUDE, REGION, Boto

from raygent.sim import Fault, Match, Reply, Rule, serve
from raygent.sim._bedrock_jobs import MIN_RECORDS

ROLE = "arn:aws:iam::123456789012:role/batch"
_ENDED = ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")
_buckets = iter(range(10_000))


def _bucket(s3: Any) -> str:
    name = f"rg-bedrock-{next(_buckets)}"
    s3.create_bucket(Bucket=name)
    return name


def _records(n: int, *, converse: bool = True) -> bytes:
    lines = []
    for i in range(n):
        text = f"question {i}" if i % 10 else f"fail {i}"
        if converse:
            model_input: dict[str, Any] = {
                "messages": [{"role": "user", "content": [{"text": text}]}],
                "inferenceConfig": {"maxTokens": 64},
            }
        else:
            model_input = {
                "anthropic_version": "bedrock-2023-05-31",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": text}],
            }
        lines.append(json.dumps({"recordId": f"R{i:05d}", "modelInput": model_input}))
    return "\n".join(lines).encode()


def _create(bedrock: Any, bucket: str, key: str, **extra: Any) -> str:
    arn: str = bedrock.create_model_invocation_job(
        jobName=extra.pop("jobName", f"job-{key.replace('/', '-').replace('.', '-')}"),
        roleArn=ROLE,
        modelId=extra.pop("modelId", CLAUDE),
        inputDataConfig={"s3InputDataConfig": {"s3Uri": f"s3://{bucket}/{key}"}},
        outputDataConfig={"s3OutputDataConfig": {"s3Uri": f"s3://{bucket}/out/"}},
        **extra,
    )["jobArn"]
    return arn


def _wait(bedrock: Any, arn: str, timeout: float = 20.0) -> dict[str, Any]:
    """Poll the job until it ends (a bounded wait on a condition, as a client polls)."""
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = bedrock.get_model_invocation_job(jobIdentifier=arn)
        if job["status"] in _ENDED:
            return job
        assert time.monotonic() < deadline, f"job still {job['status']}"
        time.sleep(0.02)


def _outputs(s3: Any, bucket: str, arn: str, name: str) -> tuple[list[dict[str, Any]], Any]:
    folder = f"out/{arn.rsplit('/', 1)[-1]}/"
    body = s3.get_object(Bucket=bucket, Key=folder + name + ".out")["Body"].read()
    manifest = json.loads(
        s3.get_object(Bucket=bucket, Key=folder + "manifest.json.out")["Body"].read()
    )
    return [json.loads(line) for line in body.splitlines()], manifest


def test_moto_implements_no_model_invocation_jobs(moto_s3: str) -> None:
    """Why the simulator serves the control plane: moto's Bedrock has no invocation
    jobs (if a moto release adds them, this says to reconsider the split)."""
    from moto.bedrock.responses import BedrockResponse

    assert not hasattr(BedrockResponse, "create_model_invocation_job")
    assert hasattr(BedrockResponse, "create_model_customization_job")


def test_a_converse_job_runs_and_writes_its_outputs(boto: Boto, moto_s3: str) -> None:
    script = [
        Rule(match=Match(last_user="^fail"), reply=Reply(fault=Fault(kind="status", status=400)))
    ]
    s3 = boto.client("s3", moto_s3)
    bucket = _bucket(s3)
    s3.put_object(Bucket=bucket, Key="in/part-a.jsonl", Body=_records(60))
    s3.put_object(Bucket=bucket, Key="in/part-b.jsonl", Body=_records(60))
    with serve(script, s3_endpoint_url=moto_s3, batch_seconds=0.2) as sim:
        bedrock = boto.client("bedrock", sim.url)
        arn = _create(bedrock, bucket, "in/", modelInvocationType="Converse")
        seen = {bedrock.get_model_invocation_job(jobIdentifier=arn)["status"]}
        job = _wait(bedrock, arn)
        stats = sim.stats()
        listed = bedrock.list_model_invocation_jobs(statusEquals="PartiallyCompleted")
    lines, manifest = _outputs(s3, bucket, arn, "part-a.jsonl")
    assert arn.startswith(f"arn:aws:bedrock:{REGION}:123456789012:model-invocation-job/")
    assert seen <= {"Submitted", "Validating", "Scheduled", "InProgress"}
    assert job["status"] == "PartiallyCompleted"
    assert (job["totalRecordCount"], job["successRecordCount"], job["errorRecordCount"]) == (
        120,
        108,
        12,
    )
    assert manifest["totalRecordCount"] == 120 and manifest["errorRecordCount"] == 12
    assert manifest["inputTokenCount"] > 0 and manifest["outputTokenCount"] > 0
    by_id = {line["recordId"]: line for line in lines}
    assert len(by_id) == 60
    assert [line["recordId"] for line in lines] != sorted(by_id)  # order not kept, as Bedrock
    ok = by_id["R00001"]["modelOutput"]
    assert ok["output"]["message"]["content"] == [{"text": "Simulated reply to: question 1"}]
    assert by_id["R00000"]["error"]["errorCode"] == 400
    assert stats.batch_lines == 120 and stats.by_api["bedrock_batch"] >= 3
    assert [j["jobArn"] for j in listed["invocationJobSummaries"]] == [arn]


def test_fewer_records_than_the_minimum_fail_the_job(boto: Boto, moto_s3: str) -> None:
    s3 = boto.client("s3", moto_s3)
    bucket = _bucket(s3)
    s3.put_object(Bucket=bucket, Key="small.jsonl", Body=_records(MIN_RECORDS - 1))
    with serve(s3_endpoint_url=moto_s3) as sim:
        bedrock = boto.client("bedrock", sim.url)
        job = _wait(bedrock, _create(bedrock, bucket, "small.jsonl"))
        lines = sim.stats().batch_lines
    assert job["status"] == "Failed"
    assert str(MIN_RECORDS) in job["message"] and "minimum" in job["message"]
    assert lines == 0


def test_invoke_model_records_of_claude_and_refused_for_other_families(
    boto: Boto, moto_s3: str
) -> None:
    s3 = boto.client("s3", moto_s3)
    bucket = _bucket(s3)
    s3.put_object(Bucket=bucket, Key="claude.jsonl", Body=_records(100, converse=False))
    with serve(s3_endpoint_url=moto_s3) as sim:
        bedrock = boto.client("bedrock", sim.url)
        claude = _wait(bedrock, _create(bedrock, bucket, "claude.jsonl", jobName="claude"))
        llama_arn = _create(
            bedrock,
            bucket,
            "claude.jsonl",
            jobName="llama",
            modelId="meta.llama3-1-8b-instruct-v1:0",
        )
        llama = _wait(bedrock, llama_arn)
    lines, _ = _outputs(s3, bucket, claude["jobArn"], "claude.jsonl")
    output = next(line for line in lines if line["recordId"] == "R00003")["modelOutput"]
    assert claude["status"] == "Completed" and claude["modelInvocationType"] == "InvokeModel"
    assert output["type"] == "message" and output["content"][0]["text"].endswith("question 3")
    assert llama["status"] == "Failed" and llama["errorRecordCount"] == 100


def test_a_stopped_job_and_an_expired_one(boto: Boto, moto_s3: str) -> None:
    s3 = boto.client("s3", moto_s3)
    bucket = _bucket(s3)
    s3.put_object(Bucket=bucket, Key="slow.jsonl", Body=_records(100))
    with serve(s3_endpoint_url=moto_s3, batch_seconds=30) as sim:
        bedrock = boto.client("bedrock", sim.url)
        arn = _create(bedrock, bucket, "slow.jsonl", jobName="slow", modelInvocationType="Converse")
        bedrock.stop_model_invocation_job(jobIdentifier=arn)
        stopped = _wait(bedrock, arn)
        with pytest.raises(botocore.exceptions.ClientError) as again:
            bedrock.stop_model_invocation_job(jobIdentifier=arn)
    with serve(s3_endpoint_url=moto_s3, batch_expire_after=30) as sim:
        bedrock = boto.client("bedrock", sim.url)
        arn = _create(bedrock, bucket, "slow.jsonl", jobName="fast", modelInvocationType="Converse")
        expired = _wait(bedrock, arn)
    assert stopped["status"] == "Stopped" and stopped["processedRecordCount"] < 100
    assert again.value.response["Error"]["Code"] == "ConflictException"
    assert expired["status"] == "Expired" and expired["processedRecordCount"] == 30
    lines, manifest = _outputs(s3, bucket, arn, "slow.jsonl")
    assert len(lines) == 30 and manifest["processedRecordCount"] == 30


def test_bad_requests_and_unknown_jobs(boto: Boto, moto_s3: str) -> None:
    s3 = boto.client("s3", moto_s3)
    bucket = _bucket(s3)
    s3.put_object(Bucket=bucket, Key="ok.jsonl", Body=_records(100))
    s3.put_object(Bucket=bucket, Key="bad.jsonl", Body=b'{"recordId": "a", "modelInput": 3}\n')
    with serve(s3_endpoint_url=moto_s3) as sim:
        bedrock = boto.client("bedrock", sim.url)
        token = "same-token-1"
        first = _create(bedrock, bucket, "ok.jsonl", jobName="idem", clientRequestToken=token)
        second = _create(bedrock, bucket, "ok.jsonl", jobName="idem", clientRequestToken=token)
        with pytest.raises(botocore.exceptions.ClientError) as duplicate:
            _create(bedrock, bucket, "ok.jsonl", jobName="idem")
        bad = _wait(bedrock, _create(bedrock, bucket, "bad.jsonl", jobName="bad"))
        missing = _wait(
            bedrock, _create(bedrock, "rg-no-such-bucket", "x.jsonl", jobName="missing")
        )
        with pytest.raises(botocore.exceptions.ClientError) as unknown:
            bedrock.get_model_invocation_job(jobIdentifier="nosuchjob")
        bad_key = boto3.client(
            "bedrock",
            region_name=REGION,
            endpoint_url=sim.url,
            aws_access_key_id="AKIASIMULATOR0000001",
            aws_secret_access_key="wrong",
        )
        with pytest.raises(botocore.exceptions.ClientError) as unsigned:
            bad_key.list_model_invocation_jobs()
        bad_key.close()
    assert first == second
    assert duplicate.value.response["Error"]["Code"] == "ConflictException"
    assert bad["status"] == "Failed" and "line 1" in bad["message"]
    assert missing["status"] == "Failed" and "Unable to read" in missing["message"]
    assert unknown.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert unsigned.value.response["Error"]["Code"] == "InvalidSignatureException"
