"""`raygent batch MODULE:AGENT INPUT --model PROVIDER:NAME`: the agent runs on the named
model, built from the environment as the provider's SDK is (its key, its base URL; AWS's
credential chain; google-auth's default chain for Vertex AI), on every wire raygent
speaks; a provider no adapter has, or a target with no model to replace, is refused
before anything is sent."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from batch_support import raygent_cli, read_jsonl, write_jsonl

from raygent.sim import Match, Reply, Rule, ToolCallReply, serve
from raygent.sim._bedrock_auth import TEST_CREDENTIALS

BEDROCK_ID = "us.anthropic.claude-haiku-4-5-20251001-v1:0"  # holds a ':' of its own
# A tool round: two requests an item, the second after the tool's result.
TOOL_ROUND = [
    Rule(match=Match(after_tool_result=True), reply=Reply(text="answered")),
    Rule(reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": "x"})])),
]
# The module's own model answers nowhere (port 9): every request the job sends goes to
# the model --model names, or the job fails.
MODULE = """
import raygent

@raygent.tool
def lookup(q: str) -> str:
    '''Look a question up.'''
    return "found " + q

bot = raygent.agent(
    model=raygent.OpenAIModel("own-model", base_url="http://127.0.0.1:9/v1", api_key="k"),
    tools=[lookup],
    name="cli_model_bot",
)

async def plain(item):
    return item
"""
# The variables of every provider, cleared so the machine's own cannot leak in.
PROVIDER_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_VERTEX_BASE_URL",
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_PROFILE",
    "RAY_ADDRESS",
)

# provider: (the model's name, the path prefix its requests go to)
WIRES = {
    "openai": ("gpt-4o-mini", "/v1/chat/completions"),
    "openai-responses": ("gpt-4o-mini", "/v1/responses"),
    "anthropic": ("claude-haiku-4-5", "/v1/messages"),
    "gemini": ("gemini-2.5-flash", "/v1beta/models/gemini-2.5-flash:generateContent"),
    "vertex": (
        "gemini-2.5-flash",
        "/v1/projects/cli-project/locations/global/publishers/google/models/"
        "gemini-2.5-flash:generateContent",
    ),
    "bedrock": (BEDROCK_ID, "/model/us.anthropic.claude-haiku-4-5-20251001-v1"),
}


def _environment(provider: str, sim: Any, folder: Path) -> dict[str, str]:
    """A machine set up for `provider` as its SDK's user would set it up."""
    env = {k: v for k, v in os.environ.items() if k not in PROVIDER_VARIABLES}
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = str(folder / "no-aws-files")
    env["CLOUDSDK_CONFIG"] = str(folder)  # no gcloud login of this machine's
    env["NO_GCE_CHECK"] = "True"  # google-auth: no metadata server here
    if provider in ("openai", "openai-responses"):
        env |= {"OPENAI_BASE_URL": sim.openai_base_url, "OPENAI_API_KEY": "sk-cli-model"}
    elif provider == "anthropic":
        env |= {"ANTHROPIC_BASE_URL": sim.anthropic_base_url, "ANTHROPIC_API_KEY": "sk-ant"}
    elif provider == "gemini":
        env |= {"GOOGLE_GEMINI_BASE_URL": sim.gemini_base_url, "GEMINI_API_KEY": "gm-key"}
    elif provider == "vertex":
        # google-auth's default chain: a service account's key file, whose token
        # endpoint is the simulator's (a JWT of the account's, signed with its key, is
        # traded for an access token).
        credentials = folder / "service-account.json"
        credentials.write_text(json.dumps(_service_account(sim.google_token_url)))
        env |= {
            "GOOGLE_VERTEX_BASE_URL": sim.gemini_base_url,
            "GOOGLE_CLOUD_PROJECT": "cli-project",
            "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
        }
    else:  # AWS's chain: the keys in the environment, the endpoint in AWS's variable
        env |= {
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": sim.url,
            "AWS_ACCESS_KEY_ID": TEST_CREDENTIALS.access_key,
            "AWS_SECRET_ACCESS_KEY": TEST_CREDENTIALS.secret_key,
            "AWS_REGION": "us-east-1",
        }
    return env


def _service_account(token_uri: str) -> dict[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return {
        "type": "service_account",
        "project_id": "cli-project",
        "private_key_id": "sim-key-1",
        "private_key": pem.decode(),
        "client_email": "raygent-cli@cli-project.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": token_uri,
    }


def _run(folder: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    proc = raygent_cli("batch", *args, "--no-progress", cwd=folder, env=env)
    _, err = proc.communicate(timeout=180)
    return proc.returncode, err


def _job(folder: Path, items: int) -> tuple[Path, Path]:
    (folder / "cli_model_bots.py").write_text(MODULE)
    source = write_jsonl(folder / "in.jsonl", [{"input": f"q{n}", "id": n} for n in range(items)])
    return source, folder / "out.jsonl"


@pytest.mark.parametrize("provider", list(WIRES))
async def test_the_agent_runs_on_the_model_named_with_its_tools(
    provider: str, tmp_path: Path
) -> None:
    name, path = WIRES[provider]
    source, sink = _job(tmp_path, 4)
    async with serve(TOOL_ROUND) as sim:
        env = _environment(provider, sim, tmp_path)
        args = ("cli_model_bots:bot", str(source), "-o", str(sink), "--backend", "local")
        code, err = await asyncio.to_thread(
            _run, tmp_path, env, *args, f"--model={provider}:{name}"
        )
        requests = [r for r in sim.requests if r.path != "/token"]
        tokens = sim.google_tokens
    assert code == 0, err
    assert "4 items: 4 completed, 0 failed" in err
    records = sorted(read_jsonl(sink), key=lambda r: r["key"])
    assert [r["data"] for r in records] == ["answered"] * 4
    assert len(requests) == 8  # each item's tool round, all on the model named
    assert all(r.path.startswith(path) for r in requests), {r.path for r in requests}
    if provider == "vertex":  # signed with a token google-auth's chain fetched
        assert tokens
    if provider == "bedrock":  # signed (SigV4, checked by the simulator) with the
        # keys the environment gave: a key it does not know would be refused 403
        assert all("x-amz-date" in r.headers and "authorization" in r.headers for r in requests)


async def test_a_second_run_resumes_on_the_model_named_and_sends_nothing_again(
    tmp_path: Path,
) -> None:
    source, sink = _job(tmp_path, 3)
    async with serve(TOOL_ROUND) as sim:
        env = _environment("gemini", sim, tmp_path)
        args = ("cli_model_bots:bot", str(source), "-o", str(sink), "--backend", "local")
        model = "--model=gemini:gemini-2.5-flash"
        first, err = await asyncio.to_thread(_run, tmp_path, env, *args, model)
        sent = sim.stats().requests
        again, said = await asyncio.to_thread(_run, tmp_path, env, *args, model, "--resume")
        resent = sim.stats().requests - sent
    assert (first, again) == (0, 0), (err, said)
    assert sent == 6 and resent == 0
    assert len(read_jsonl(sink)) == 3


async def test_the_estimate_prices_the_model_named(tmp_path: Path) -> None:
    source, _ = _job(tmp_path, 6)
    async with serve(TOOL_ROUND) as sim:
        env = _environment("gemini", sim, tmp_path)
        args = ("cli_model_bots:bot", str(source), "--estimate", "--sample", "2")
        code, err = await asyncio.to_thread(
            _run, tmp_path, env, *args, "--backend", "local", "--model", "gemini:gemini-2.5-flash"
        )
        paths = {r.path for r in sim.requests}
    assert code == 0, err
    assert paths == {WIRES["gemini"][1]}
    line = err.split("estimate: ", 1)[1].splitlines()[0]
    assert line.startswith("6 items: ~$") and "12 requests" in line, line
    assert float(line.split("~$", 1)[1].split()[0]) > 0  # priced as Gemini's model


@pytest.mark.parametrize(
    ("model", "said"),
    [
        (
            "gemeni:gemini-2.5-flash",
            "raygent batch: --model gemeni:gemini-2.5-flash: unknown provider gemeni "
            "(did you mean gemini?)",
        ),
        ("gpt-4o-mini", "a model is named PROVIDER:NAME"),
        ("openai:", "a model is named PROVIDER:NAME"),
    ],
)
async def test_a_model_no_adapter_has_is_refused_before_anything_is_sent(
    model: str, said: str, tmp_path: Path
) -> None:
    source, sink = _job(tmp_path, 2)
    async with serve(TOOL_ROUND) as sim:
        env = _environment("openai", sim, tmp_path)
        args = ("cli_model_bots:bot", str(source), "-o", str(sink), "--backend", "local")
        code, err = await asyncio.to_thread(_run, tmp_path, env, *args, "--model", model)
        sent = sim.stats().requests
    assert code == 2, err
    assert said in err and sent == 0 and not sink.exists()


def test_a_target_with_no_model_is_refused(tmp_path: Path) -> None:
    source, sink = _job(tmp_path, 2)
    env = {k: v for k, v in os.environ.items() if k not in PROVIDER_VARIABLES}
    args = ("cli_model_bots:plain", str(source), "-o", str(sink), "--backend", "local")
    code, err = _run(tmp_path, env, *args, "--model", "openai:gpt-4o-mini")
    assert code == 2
    assert "--model replaces an agent's model; function is not an agent" in err
    assert not sink.exists()


@pytest.mark.timeout(240)
async def test_on_ray_the_runners_send_to_the_model_named(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # The model is built on the driver from its environment and travels to the batch
    # runners with the agent: the workers' environment has none of its variables.
    request.getfixturevalue("ray_session")
    import ray

    address = ray.get_runtime_context().gcs_address
    source, sink = _job(tmp_path, 6)
    async with serve(TOOL_ROUND) as sim:
        env = _environment("gemini", sim, tmp_path) | {
            "RAYGENT_BACKEND": "ray",
            "RAY_ADDRESS": address,
        }
        args = ("cli_model_bots:bot", str(source), "-o", str(sink), "--backend", "ray")
        code, err = await asyncio.to_thread(
            _run, tmp_path, env, *args, "--model", "gemini:gemini-2.5-flash"
        )
        paths = {r.path for r in sim.requests}
    assert code == 0, err
    assert "6 items: 6 completed, 0 failed" in err
    assert paths == {WIRES["gemini"][1]}
