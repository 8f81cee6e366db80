"""`raygent batch MODULE:AGENT INPUT -o OUTPUT` as a subprocess."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest
from batch_support import (
    HANG_FROM,
    line_count,
    raygent_cli,
    read_jsonl,
    wait_until,
    write_jsonl,
)

from raygent.cli import main
from raygent.sim import serve


def test_the_cli_runs_an_agent_over_a_file(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"input": f"hi {n}", "id": n} for n in range(20)])
    sink = tmp_path / "out.jsonl"
    proc = raygent_cli(
        "batch",
        "tests.batch.batch_support:echo_agent",
        str(source),
        "-o",
        str(sink),
        "--concurrency",
        "4",
        "--retries",
        "1",
        "--backend",
        "local",
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "20 items: 20 completed, 0 failed, 0 cancelled" in err
    records = sorted(read_jsonl(sink), key=lambda r: r["index"])
    assert [r["data"] for r in records] == [f"HI {n}" for n in range(20)]
    assert [r["key"] for r in records] == list(range(20))


def test_the_cli_exits_1_when_items_fail(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"n": n} for n in range(4)])
    sink = tmp_path / "out.parquet"
    proc = raygent_cli(
        "batch", "tests.batch.batch_support:fails_on_odd", str(source), "-o", str(sink)
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "2 completed, 2 failed" in err and "ValueError x2" in err
    assert sink.is_dir()


def test_the_cli_reports_bad_targets(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", ["a"])
    out = str(tmp_path / "out.jsonl")
    assert main(["batch", "no_such_module_here:agent", str(source), "-o", out]) == 2
    assert "No module named" in capsys.readouterr().err
    assert main(["batch", "missing-colon", str(source), "-o", out]) == 2
    assert "MODULE:AGENT" in capsys.readouterr().err
    assert main(["batch", "batch_support:echo_agent", str(tmp_path / "nope.jsonl"), "-o", out]) == 2
    assert "no such input" in capsys.readouterr().err


@pytest.mark.timeout(240)
def test_the_cli_on_ray_ships_a_module_the_workers_cannot_import(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # The module lives only in the working directory, which Ray's workers do not have on
    # their path: it must travel by value to the batch runners. The driver joins the
    # session's Ray (RAY_ADDRESS), as a driver joins its cluster: its job's workers share
    # nothing with this process's (no PYTHONPATH; the module refuses to load in a worker).
    request.getfixturevalue("ray_session")
    import ray

    address = ray.get_runtime_context().gcs_address
    (tmp_path / "my_agents.py").write_text(
        "from ray._private import worker\n"
        "if worker.global_worker.mode == worker.WORKER_MODE:  # as on another machine\n"
        "    raise ImportError('my_agents exists only where the driver runs')\n"
        "import raygent\n"
        "from raygent.testing import FunctionModel, reply\n\n"
        "def shout(messages, options):\n"
        "    return reply(messages[-1].text.upper())\n\n"
        "loud = raygent.agent(model=FunctionModel(shout))\n"
    )
    source = write_jsonl(tmp_path / "in.jsonl", [{"input": f"hi {n}", "id": n} for n in range(12)])
    sink = tmp_path / "out.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    proc = raygent_cli(
        "batch",
        "my_agents:loud",
        str(source),
        "-o",
        str(sink),
        "--backend",
        "ray",
        cwd=tmp_path,
        env={**env, "RAYGENT_BACKEND": "ray", "RAY_ADDRESS": address},
    )
    _, err = proc.communicate(timeout=220)
    assert proc.returncode == 0, err  # 1, "the batch failed: ... cannot load", if not shipped
    assert "12 items: 12 completed, 0 failed, 0 cancelled" in err
    records = sorted(read_jsonl(sink), key=lambda r: r["index"])
    assert [r["data"] for r in records] == [f"HI {n}" for n in range(12)]


def test_the_cli_refuses_a_negative_budget_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", ["a"])
    out = tmp_path / "out.jsonl"
    args = ["tests.batch.batch_support:echo_agent", str(source), "-o", str(out)]
    code = main(["batch", *args, "--budget-usd", "-1", "--backend", "local"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "raygent batch: Budget(usd=...) cannot be negative, got -1.0\n"
    assert not out.exists()


def test_every_cli_run_prints_its_cost(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [f"hi {n}" for n in range(5)])
    said = {}
    for target in ("priced_echo_agent", "echo_agent"):
        proc = raygent_cli(
            "batch",
            f"tests.batch.batch_support:{target}",
            str(source),
            "-o",
            str(tmp_path / f"{target}.jsonl"),
            "--backend",
            "local",
        )
        _, said[target] = proc.communicate(timeout=60)
        assert proc.returncode == 0, said[target]
    priced = re.search(
        r"^cost: \$(\d+\.\d+) \(5 requests, (\d+) in / (\d+) out tokens\)$",
        said["priced_echo_agent"],
        re.MULTILINE,
    )
    assert priced is not None, said["priced_echo_agent"]
    tokens_in, tokens_out = int(priced[2]), int(priced[3])
    assert tokens_in > 0 and tokens_out > 0
    assert float(priced[1]) == pytest.approx((tokens_in * 1.0 + tokens_out * 2.0) / 1e6, rel=0.05)
    assert "cost: unknown (no pricing for the model) (5 requests" in said["echo_agent"]


def test_an_interrupted_cli_run_counts_of_the_whole_input(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"n": n, "key": f"k{n}"} for n in range(30)])
    sink = tmp_path / "out.jsonl"
    args = ("tests.batch.batch_support:double_or_hang", str(source), "-o", str(sink))
    proc = raygent_cli(
        "batch", *args, "--concurrency", "4", "--no-progress", "--backend", "local",
        env={**os.environ, HANG_FROM: "12"},
    )  # fmt: skip
    try:
        wait_until(lambda: line_count(sink) >= 12, timeout=60, what="12 results")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    # 12 completed, the 4 hanging in flight cancelled; 14 never started: "16 of 30".
    assert "16 of 30 items: 12 completed, 0 failed, 4 cancelled" in err, err


@pytest.mark.parametrize("fail", [False, True])
def test_the_cli_shows_tool_errors_and_fails_on_them_when_asked(tmp_path: Path, fail: bool) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [f"q{n}" for n in range(3)])
    sink = tmp_path / "out.jsonl"
    args = ["tests.batch.batch_support:broken_tool_agent", str(source), "-o", str(sink)]
    args += ["--backend", "local", *(["--fail-on-tool-error"] if fail else [])]
    proc = raygent_cli("batch", *args)
    _, err = proc.communicate(timeout=60)
    rows = read_jsonl(sink)
    assert (
        "tool errors: 3 failed calls in 3 items (first: TOOL_EXECUTION: tool 'broken_lookup'" in err
    )
    assert [r["tool_errors"] for r in rows] == [1, 1, 1]
    if fail:
        assert proc.returncode == 1, err
        assert "3 items: 0 completed, 3 failed" in err and "TOOL_EXECUTION x3" in err
        assert "--fail-on-tool-error fails" not in err
    else:
        assert proc.returncode == 0, err
        assert "3 items: 3 completed, 0 failed" in err
        assert "--fail-on-tool-error fails such items" in err


# -- the CLI speaks CLI (issue #44, points 1 and 7) ---------------------------------------

OPTIONS_TARGET = "tests.batch.options_target"


def _cli(*args: str, sim: str | None = None) -> tuple[int, str]:
    env = {**os.environ, "RAYGENT_OPTIONS_TEST_SIM": sim or "http://127.0.0.1:9/v1"}
    proc = raygent_cli("batch", *args, "--backend", "local", "--no-progress", env=env)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_a_misspelt_flag_is_refused_naming_the_closest(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", ["a"])
    sink = tmp_path / "out.jsonl"
    code, err = _cli(f"{OPTIONS_TARGET}:bot", str(source), "-o", str(sink), "--concurency", "4")
    assert code == 2, err
    assert err == "raygent batch: unknown option --concurency (did you mean --concurrency?)\n"
    assert not sink.exists()
    code, err = _cli(f"{OPTIONS_TARGET}:bot", str(source), "-o", str(sink), "--zzz")
    assert (code, err) == (2, "raygent batch: unknown option --zzz; see --help\n")


async def test_service_tier_and_model_options_reach_every_request(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [f"q{n}" for n in range(3)])
    sink = tmp_path / "out.jsonl"
    async with serve() as sim:
        code, err = await asyncio.to_thread(
            _cli,
            f"{OPTIONS_TARGET}:bot",
            str(source),
            "-o",
            str(sink),
            "--service-tier",
            "flex",
            "--model-option",
            "max_tokens=77",
            "--model-option",
            "temperature=0.25",
            "--model-option",
            'provider_options={"openai": {"seed": 7}}',
            "--model-option",
            "prompt_cache_key=job-42",
            sim=sim.openai_base_url,
        )
        bodies = [r.body for r in sim.requests]
    assert code == 0, err
    assert len(bodies) == 3 and line_count(sink) == 3
    for body in bodies:
        assert body["service_tier"] == "flex"  # a string stays a string
        assert (body["max_tokens"], body["temperature"]) == (77, 0.25)  # JSON values
        assert body["seed"] == 7 and body["prompt_cache_key"] == "job-42"


async def test_a_bad_model_option_is_refused_before_anything_runs(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", ["a"])
    sink = tmp_path / "out.jsonl"
    target = f"{OPTIONS_TARGET}:bot"
    async with serve() as sim:
        said = []
        for option in ("max_tokenz=5", "top_p=0.9", "temperature=hot", "max_tokens"):
            code, err = await asyncio.to_thread(
                _cli,
                target,
                str(source),
                "-o",
                str(sink),
                "--model-option",
                option,
                sim=sim.openai_base_url,
            )
            assert code == 2, err
            said.append(err.strip())
        requests = sim.stats().requests
    assert requests == 0 and not sink.exists()
    assert said[0] == (
        "raygent batch: --model-option: unknown model option max_tokenz (did you mean max_tokens?)"
    )
    tail = """goes in provider_options, by adapter: --model-option provider_options="""
    assert said[1].endswith(tail + """'{"openai": {"top_p": ...}}'""")
    assert said[2].startswith(
        'raygent batch: --model-option temperature="hot": Input should be a valid number'
    )
    assert (
        said[3]
        == "raygent batch: --model-option takes KEY=VALUE (e.g. max_tokens=512), not 'max_tokens'"
    )


def test_the_cli_names_its_flags_not_python_keywords(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", ["a", "b"])
    sink = tmp_path / "out.jsonl"
    target = f"{OPTIONS_TARGET}:plain"
    assert _cli(target, str(source), "-o", str(sink))[0] == 0
    runs = [
        ("-o", str(sink)),
        ("-o", str(sink), "--resume", "--mode", "append"),
        ("-o", str(tmp_path / "b.jsonl"), "--service-tier", "flex", "--provider-batch"),
        ("-o", str(tmp_path / "c.jsonl"), "--fail-on-tool-error"),
        ("-o", str(tmp_path / "d.jsonl"), "--model-option", "max_tokens=5"),
        ("-o", str(tmp_path / "e.jsonl"), "--concurrency", "0"),
    ]
    said = []
    for args in runs:
        code, err = _cli(target, str(source), *args)
        assert code == 2, err
        said.append(err.strip().removeprefix("raygent batch: "))
    assert said == [
        f"{sink} holds the results of an earlier job: pass --resume to go on with that job,"
        " or --mode overwrite to replace them or --mode append to add this job's after them",
        f"--resume goes on with the job that wrote {sink}; --mode append starts a new job:"
        " give one or the other",
        "--service-tier and --provider-batch are two prices: choose one",
        "--fail-on-tool-error needs an agent (flows and plain callables run no tools)",
        "--model-option is for an agent's (or a flow's) runs: a plain callable gets each item"
        " as it is",
        "--concurrency must be a positive int, not 0",
    ]
    assert not any("=" in line.split(":")[0] for line in said[1:])  # no `resume=True`
    assert line_count(sink) == 2  # nothing refused touched the sink
