"""The one rule every refusal of an unknown option name uses (issue #44, point 1): the
closest known name, on a table of real misspellings, and the typed error that says it,
spelt for a Python caller or a CLI user."""

from __future__ import annotations

import pickle

import pytest

import raygent
from raygent.agents._options import RUN_OPTIONS
from raygent.errors import InvalidOptionsError, UnknownOptionError
from raygent.models._names import (
    MODEL_OPTIONS,
    PYTHON,
    Spelling,
    check_model_options,
    check_run_options,
    closest,
    unknown_option,
)

SETTINGS = [
    *("api_key", "base_url", "capabilities", "pricing", "timeout", "headers"),
    *("max_concurrency", "rate_limit", "requests_per_minute", "tokens_per_minute"),
    *("http_client", "service_tier", "prompt_cache_key", "prompt_cache_retention"),
    *("max_tokens_field", "vision"),
]
BATCH = [
    *("concurrency", "retry", "on_item", "signal", "sink", "resume", "mode", "item_key"),
    *("progress", "run_options", "runners", "durable", "approvals", "provider_batch"),
    *("deadline", "cache", "budget", "reuse", "tool_errors", "service_tier"),
]
RUN = sorted(RUN_OPTIONS)
MODEL = sorted(MODEL_OPTIONS)

# (what was typed, where it was typed, what was meant)
MISSPELT = [
    ("outptu", RUN, "output"),  # two letters swapped
    ("ouput", RUN, "output"),
    ("system_promt", RUN, "system_prompt"),
    ("sytem_prompt", RUN, "system_prompt"),
    ("system", RUN, "system_prompt"),  # the leading word of a longer name
    ("sesion_id", RUN, "session_id"),
    ("session", RUN, "session_id"),
    ("histroy", RUN, "history"),
    ("model_option", RUN, "model_options"),
    ("tool_error", RUN, "tool_errors"),
    ("capture_message", RUN, "capture_messages"),
    ("runid", RUN, "run_id"),
    ("max_tokenz", MODEL, "max_tokens"),  # not max_tokens_field, not tool_choice
    ("max_token", MODEL, "max_tokens"),
    ("maxtokens", MODEL, "max_tokens"),
    ("MaxTokens", MODEL, "max_tokens"),
    ("max-tokens", MODEL, "max_tokens"),
    ("tokens_max", MODEL, "max_tokens"),  # the same words in another order
    ("temprature", MODEL, "temperature"),
    ("temperture", MODEL, "temperature"),
    ("tool_choices", MODEL, "tool_choice"),
    ("toolchoice", MODEL, "tool_choice"),
    ("reasoning_effort", MODEL, "reasoning"),  # the name with a word more
    ("prompt_cache", MODEL, "prompt_cache_key"),
    ("service_teir", MODEL, "service_tier"),
    ("respone_schema", MODEL, "response_schema"),
    ("max_tokenz", [*SETTINGS, "max_tokens"], "max_tokens"),
    ("max_concurency", SETTINGS, "max_concurrency"),
    ("baseurl", SETTINGS, "base_url"),
    ("api-key", SETTINGS, "api_key"),
    ("concurency", BATCH, "concurrency"),
    ("concurrancy", BATCH, "concurrency"),
    ("provider_batches", BATCH, "provider_batch"),
    ("itemkey", BATCH, "item_key"),
    ("run_option", BATCH, "run_options"),
    ("--concurency", ["--concurrency", "--retries", "--resume"], "--concurrency"),
    ("--rmp", ["--rpm", "--tpm", "--itpm", "--otpm"], "--rpm"),
    ("--mdoe", ["--mode", "--model-option", "--item-key"], "--mode"),
]
# Names too far from anything to guess (a wrong guess is worse than none).
FAR = [
    ("max_token", SETTINGS),  # max_tokens_field is not what was meant
    ("seed", MODEL),
    ("top_p", MODEL),
    ("stream", RUN),
    ("out", RUN),
    ("tools", RUN),
    ("retries", BATCH),  # an alias says it (see below), not the distance
]


@pytest.mark.parametrize(("typed", "known", "meant"), MISSPELT, ids=[m[0] for m in MISSPELT])
def test_the_closest_name_is_what_was_meant(typed: str, known: list[str], meant: str) -> None:
    assert closest(typed, known) == meant
    assert closest(typed, list(reversed(known))) == meant  # whatever the order


@pytest.mark.parametrize(("typed", "known"), FAR, ids=[f[0] for f in FAR])
def test_a_name_far_from_all_is_not_guessed(typed: str, known: list[str]) -> None:
    assert closest(typed, known) is None


def test_ties_go_to_the_longer_common_prefix_then_the_declared_order() -> None:
    assert closest("max_tokens_fiel", ["max_tokens", "max_tokens_field"]) == "max_tokens_field"
    assert closest("ab", ["ac", "ad"]) == "ac"
    assert closest("ab", ["ad", "ac"]) == "ad"


def test_the_error_is_typed_and_keeps_what_it_says() -> None:
    error = unknown_option("outptu", RUN, subject="a run of agent 'bot'", what="run option")
    assert isinstance(error, UnknownOptionError)
    assert isinstance(error, InvalidOptionsError) and isinstance(error, TypeError)
    assert error.code == "UNKNOWN_OPTION" and error.category == "config"
    assert (
        str(error) == "a run of agent 'bot': unknown run option 'outptu' (did you mean 'output'?)"
    )
    assert (error.option, error.suggestion) == ("outptu", "output")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is UnknownOptionError and again.to_dict() == error.to_dict()


def test_a_name_that_belongs_elsewhere_says_where() -> None:
    elsewhere = {"max_tokens": "max_tokens is a model option: pass model_options=..."}
    said = unknown_option("max_token", SETTINGS, subject="OpenAIModel()", elsewhere=elsewhere)
    assert str(said).endswith(": max_tokens is a model option: pass model_options=...")
    assert said.suggestion == "max_tokens"
    # A known name as close as one elsewhere wins: it is what this place takes.
    both = unknown_option("vison", [*SETTINGS], subject="X()", elsewhere={"vision": "no"})
    assert "did you mean 'vision'" in str(both)


def test_nothing_close_lists_the_known_names_and_a_tail() -> None:
    said = unknown_option("zzz", ["b", "a"], subject="f()", tail="see the manual")
    assert str(said) == "f(): unknown option 'zzz'; known: a, b; see the manual"
    quiet = unknown_option("zzz", ["b", "a"], subject="", listed=False, tail="see --help")
    assert str(quiet) == "unknown option 'zzz'; see --help"


def test_aliases_name_what_other_libraries_call_an_option() -> None:
    for other, ours in [
        ("max_completion_tokens", "max_tokens"),
        ("reasoning_effort", "reasoning"),
        ("response_format", "response_schema"),
    ]:
        with pytest.raises(UnknownOptionError) as caught:
            check_model_options({other: 1}, subject="s")
        assert caught.value.suggestion == ours


def test_a_provider_parameter_is_sent_to_provider_options() -> None:
    with pytest.raises(UnknownOptionError) as caught:
        check_model_options({"top_p": 0.9}, subject="s")
    said = str(caught.value)
    assert caught.value.suggestion is None
    assert "model_options={'provider_options': {'openai': {'top_p': ...}}}" in said
    with pytest.raises(UnknownOptionError) as caught:
        check_model_options(
            {"top_p": 0.9}, subject="s", spelling=Spelling({"model_options": "--model-option"})
        )
    assert """--model-option provider_options='{"openai": {"top_p": ...}}'""" in str(caught.value)


def test_run_options_send_a_model_option_to_model_options() -> None:
    with pytest.raises(
        UnknownOptionError,
        match=r"temperature is a model option: pass model_options=\{'temperature': \.\.\.\}",
    ):
        check_run_options({"temperature": 0.1}, RUN_OPTIONS, subject="s")
    with pytest.raises(UnknownOptionError, match=r"'max_tokenz' .did you mean 'max_tokens'"):
        check_run_options({"model_options": {"max_tokenz": 1}}, RUN_OPTIONS, subject="s")
    check_run_options({"output": int, "model_options": {"max_tokens": 1}}, RUN_OPTIONS, subject="s")


def test_an_option_is_spelt_for_its_reader() -> None:
    cli = Spelling({"resume": "--resume", "mode": "--mode", "model_options": "--model-option"})
    assert (PYTHON.option("resume", True), cli.option("resume", True)) == (
        "resume=True",
        "--resume",
    )
    assert PYTHON.option("mode", "append") == 'mode="append"'
    assert cli.option("mode", "append") == "--mode append"
    assert (PYTHON.option("mode"), cli.option("mode")) == ("mode=", "--mode")
    assert PYTHON.entry("model_options", "max_tokens") == "model_options={'max_tokens': ...}"
    assert cli.entry("model_options", "max_tokens") == "--model-option max_tokens=..."
    assert cli.option("runners", 2) == "runners=2"  # no flag: as Python writes it
    assert (PYTHON.name("x"), cli.name("--x")) == ("'x'", "--x")


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("max_token", "max_tokens is a model option: pass model_options={'max_tokens': ...}"),
        ("max_tokenz", "max_tokens is a model option"),
        ("temperature", "temperature is a model option"),
        ("max_concurency", "(did you mean 'max_concurrency'?)"),
    ],
)
def test_a_model_setting_that_is_a_model_option_says_so(typed: str, said: str) -> None:
    with pytest.raises(UnknownOptionError, match="OpenAIModel") as caught:
        raygent.OpenAIModel("gpt-4o-mini", api_key="sk-x", **{typed: 5})  # type: ignore[arg-type]
    assert said in str(caught.value)
    assert "max_tokens_field" not in str(caught.value)
