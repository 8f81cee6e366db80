"""A Bedrock agent for the CLI test: `tests.provider_batch.pb_cli_bedrock:bot`, on the
simulator at $RAYGENT_TEST_SIM_URL, its batch inference jobs' records in the S3 bucket
$RAYGENT_TEST_S3_BUCKET of the S3 server at $RAYGENT_TEST_S3_URL."""

from __future__ import annotations

import os

import raygent
from raygent.models import BedrockBatch

bot = raygent.agent(
    model=raygent.BedrockModel(
        "us.anthropic.claude-haiku-4-5-20251001-v1:0",
        region="us-east-1",
        base_url=os.environ["RAYGENT_TEST_SIM_URL"],
        access_key="AKIASIMULATOR0000001",
        secret_key="sim/secret+key/for/tests/only/000000000",
        batch=BedrockBatch(
            s3_uri=f"s3://{os.environ['RAYGENT_TEST_S3_BUCKET']}/cli",
            role_arn="arn:aws:iam::123456789012:role/raygent-batch",
            endpoint_url=os.environ["RAYGENT_TEST_SIM_URL"],
            s3_endpoint_url=os.environ["RAYGENT_TEST_S3_URL"],
        ),
    )
)
