"""Failures named for what happened: a refused connection or a failed DNS lookup is a
connection error naming the host, a server that does not answer in time is a timeout;
a missing API key is said, naming the variable to set, before any I/O."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from adapter_support import make_model

from raygent import (
    AnthropicModel,
    BedrockModel,
    GeminiModel,
    OpenAIModel,
    OpenAIResponsesModel,
    UserMessage,
)
from raygent.errors import (
    AuthenticationError,
    OfflineError,
    ProviderConnectionError,
    ProviderTimeoutError,
)
from raygent.sim import serve

HELLO = [UserMessage(content="hello")]


class _Urls:
    def __init__(self, url: str) -> None:
        self.openai_base_url = url + "/v1"
        self.anthropic_base_url = url
        self.url = url  # Bedrock's endpoint
        self.gemini_base_url = url


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _call(model: Any, streamed: bool) -> None:
    if streamed:
        async for _ in model.stream(HELLO):
            pass
    else:
        await model.complete(HELLO)


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_a_refused_connection_is_a_connection_error(provider: str, streamed: bool) -> None:
    port = _closed_port()
    model = make_model(provider, _Urls(f"http://127.0.0.1:{port}"))
    with pytest.raises(ProviderConnectionError) as info:
        await _call(model, streamed)
    assert type(info.value) is ProviderConnectionError
    assert info.value.code == "PROVIDER_CONNECTION" and info.value.retryable
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text and "ssl:default" not in text
    assert "refused" in text.lower() or "connect call failed" in text.lower()


async def test_a_failed_dns_lookup_is_a_connection_error(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `.invalid` never resolves (RFC 2606); offline mode would refuse before the lookup.
    monkeypatch.delenv("RAYGENT_OFFLINE")
    model = make_model(provider, _Urls("http://nonexistent.invalid:8080"))
    with pytest.raises(ProviderConnectionError) as info:
        await model.complete(HELLO)
    assert type(info.value) is ProviderConnectionError
    assert "nonexistent.invalid:8080" in str(info.value)
    assert "ssl:default" not in str(info.value)


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """Accepts connections and reads, never answers."""
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read(65536)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    for writer in held:
        writer.close()
    server.close()


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_a_server_that_never_answers_is_a_timeout(
    provider: str, silent_server: str, streamed: bool
) -> None:
    model = make_model(provider, _Urls(silent_server), timeout=0.3)
    with pytest.raises(ProviderTimeoutError) as info:
        await _call(model, streamed)
    assert info.value.code == "PROVIDER_TIMEOUT" and info.value.retryable


MODELS = {
    "openai": (OpenAIModel, "gpt-4o-mini", "OPENAI_API_KEY"),
    "openai_responses": (OpenAIResponsesModel, "gpt-4o-mini", "OPENAI_API_KEY"),
    "anthropic": (AnthropicModel, "claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
    "gemini": (GeminiModel, "gemini-2.5-flash", "GEMINI_API_KEY"),
}


@pytest.mark.parametrize("provider", list(MODELS))  # the keyed wires (Bedrock signs: below)
@pytest.mark.parametrize("offline", [True, False], ids=["offline", "online"])
async def test_a_missing_key_is_said_before_any_io(
    provider: str, offline: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls, name, variable = MODELS[provider]
    monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    if not offline:
        monkeypatch.delenv("RAYGENT_OFFLINE")
    model = cls(name)

    def no_io(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a request was sent")

    monkeypatch.setattr("raygent.models._transport.shared_session", no_io)
    for streamed in (False, True):
        with pytest.raises(AuthenticationError) as info:
            await _call(model, streamed)
        error = info.value
        assert not isinstance(error, OfflineError)
        assert variable in str(error) and not error.retryable
        assert error.provider_code == "missing_api_key" and error.env_key == variable


@pytest.mark.parametrize("provider", list(MODELS))
async def test_a_key_from_the_environment_is_enough(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls, name, variable = MODELS[provider]
    monkeypatch.setenv(variable, "sk-from-env-0000")
    with pytest.raises(OfflineError):  # past the key check, stopped by offline mode
        await cls(name).complete(HELLO)


@pytest.mark.parametrize("provider", list(MODELS))
async def test_no_key_is_needed_by_a_server_of_ones_own(provider: str) -> None:
    """An explicit base URL, or `api_key=None` given on purpose: no key is asked for."""
    async with serve() as sim:
        reply = await make_model(provider, sim, api_key=None).complete(HELLO)
        assert reply.text
        cls, name, _ = MODELS[provider]
        url = {"anthropic": sim.anthropic_base_url, "gemini": sim.gemini_base_url}.get(
            provider, sim.openai_base_url
        )
        reply = await cls(name, base_url=url).complete(HELLO)
        assert reply.text


@pytest.mark.parametrize("provider", list(MODELS))
async def test_api_key_none_on_purpose_needs_no_key(provider: str) -> None:
    cls, name, _ = MODELS[provider]
    with pytest.raises(OfflineError):  # no key asked for: offline mode is what stops it
        await cls(name, api_key=None).complete(HELLO)


async def test_bedrock_without_credentials_says_so_before_any_io(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Bedrock signs: with no credentials anywhere in botocore's chain, the request is
    refused before it is sent (offline mode, checked first, stops a remote one)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK", raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to ask
    with pytest.raises(OfflineError):
        await BedrockModel("amazon.nova-lite-v1:0", region="us-east-1").complete(HELLO)
    monkeypatch.delenv("RAYGENT_OFFLINE")

    def no_io(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a request was sent")

    monkeypatch.setattr("raygent.models._transport.shared_session", no_io)
    model = BedrockModel("amazon.nova-lite-v1:0", region="us-east-1")
    for streamed in (False, True):
        with pytest.raises(AuthenticationError, match="no AWS credentials"):
            await _call(model, streamed)
