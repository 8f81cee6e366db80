"""``raygent sim`` as a subprocess: prints its URLs, serves, stops on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from raygent.cli import main


def test_cli_serves_until_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("rules:\n  - reply: from the cli\n")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "raygent", "sim", "--port", "0", "--script", str(script)),
            *("--rpm", "600", "--tpm", "90000", "--itpm", "6000", "--otpm", "1200"),
            *("--burst-seconds", "2"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        urls = dict(proc.stdout.readline().strip().split("=", 1) for _ in range(6))
        assert first.startswith("raygent sim listening on http://127.0.0.1:")
        assert urls["OPENAI_BASE_URL"] == first.split()[-1] + "/v1"
        assert urls["GOOGLE_GEMINI_BASE_URL"] == urls["GOOGLE_VERTEX_BASE_URL"] == first.split()[-1]
        assert urls["AWS_ENDPOINT_URL_BEDROCK_RUNTIME"] == urls["AWS_ENDPOINT_URL_BEDROCK"]
        assert urls["AWS_ENDPOINT_URL_BEDROCK"] == first.split()[-1]
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        url = urls["OPENAI_BASE_URL"] + "/chat/completions"
        resp = httpx.post(url, json=body, timeout=10)
        assert resp.json()["choices"][0]["message"]["content"] == "from the cli"
        assert resp.headers["x-ratelimit-limit-requests"] == "600"
        assert resp.headers["x-ratelimit-remaining-requests"] == "19"  # 2 s of 10 a second
        assert resp.headers["x-ratelimit-limit-tokens"] == "90000"
        an_body = {**body, "max_tokens": 5}
        an = httpx.post(first.split()[-1] + "/v1/messages", json=an_body, timeout=10)
        assert an.headers["anthropic-ratelimit-input-tokens-limit"] == "6000"
        assert an.headers["anthropic-ratelimit-output-tokens-limit"] == "1200"
        assert not url.endswith(":0/v1/chat/completions")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


def test_cli_requires_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2
    assert "sim" in capsys.readouterr().err
