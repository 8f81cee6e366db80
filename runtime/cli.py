"""The ``raygent`` command line: one subcommand per tool (``raygent sim``, ``raygent demo``,
``raygent batch``)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from .errors import UnknownOptionError
from .models._names import Spelling, unknown_option

# Flags are shown as typed (no quotes), whatever option they stand for.
CLI_WORDS = Spelling({})


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the chosen subcommand."""
    parser = argparse.ArgumentParser(prog="raygent", description="raygent command line")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_sim(commands)
    _add_demo(commands)
    _add_batch(commands)
    given = list(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(given)
    if extra:
        # Refused before anything runs, naming the closest flag (argparse's own message
        # names none): a misspelt flag must not be taken for an input.
        command = commands.choices[args.command]
        print(f"{command.prog}: {unknown_flag(extra, command)}", file=sys.stderr)
        return 2
    args.argv = given  # the command, to repeat it
    run: Callable[[argparse.Namespace], int] = args.run
    return run(args)


def unknown_flag(extra: Sequence[str], parser: argparse.ArgumentParser) -> UnknownOptionError:
    """The error of the first word of `extra` the subcommand's `parser` does not take:
    a flag it has not (with the closest it has), else an argument too many."""
    flags = [flag for action in parser._actions for flag in action.option_strings]
    for word in extra:
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            return unknown_option(
                name, flags, subject="", spelling=CLI_WORDS, listed=False, tail="see --help"
            )
    return UnknownOptionError(
        f"unexpected argument {extra[0]!r} (see --help)", option=extra[0], where=parser.prog
    )


def _add_sim(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = commands.add_parser(
        "sim",
        help="run the provider simulator (OpenAI and Anthropic wires) in the foreground",
        description="Run the provider simulator until SIGINT/SIGTERM. Prints the base URLs.",
    )
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=8900, help="0 picks a free port")
    sim.add_argument("--latency-ms", type=float, default=0.0, help="fixed time to first byte")
    sim.add_argument("--per-token-ms", type=float, default=0.0, help="added per output token")
    sim.add_argument("--jitter-ms", type=float, default=0.0, help="seeded extra in [0, N]")
    sim.add_argument("--max-concurrency", type=int, default=None, help="429 beyond N in flight")
    sim.add_argument("--rpm", type=int, default=None, help="requests per minute before 429")
    sim.add_argument("--tpm", type=int, default=None, help="tokens per minute (prompt + max)")
    sim.add_argument("--itpm", type=int, default=None, help="input tokens per minute")
    sim.add_argument("--otpm", type=int, default=None, help="output tokens per minute")
    sim.add_argument(
        "--burst-seconds", type=float, default=1.0, help="rate buckets hold N seconds' share"
    )
    sim.add_argument(
        "--window-seconds",
        type=float,
        default=None,
        help="enforce the rates over sliding windows of N seconds (N seconds' share each)",
    )
    sim.add_argument("--context-window", type=int, default=None, help="400 beyond N tokens")
    sim.add_argument("--fault-rate", type=float, default=0.0, help="share of 500 responses")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument(
        "--script", default=None, help="YAML or JSON script file (format: docs/simulator.md)"
    )
    sim.set_defaults(run=_run_sim)


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="run an agent against the built-in provider simulator (no key, no network)",
        description="Start the simulator in-process and run an agent with a tool and "
        "structured output over a bundled dataset of 500 questions (raygent.batch, SQLite "
        "sessions), writing the results as they end.",
    )
    demo.add_argument("--latency-ms", type=float, default=50.0, help="simulated latency")
    demo.add_argument("--items", type=int, default=None, help="only the first N questions")
    demo.add_argument("--concurrency", type=int, default=64, help="questions at a time")
    demo.add_argument(
        "--provider",
        choices=("openai", "gemini"),
        default="openai",
        help="the wire the bulk run speaks (the simulator speaks each)",
    )
    demo.add_argument(
        "--out",
        default=None,
        help="folder for results.jsonl and sessions.db (default: a new temporary folder)",
    )
    demo.set_defaults(run=_run_demo)


def _add_batch(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    batch = commands.add_parser(
        "batch",
        help="run an agent over every item of a JSONL, CSV or Parquet input",
        description="Run MODULE:AGENT (an agent, or an async callable) on each item of INPUT "
        "and write each result to OUTPUT as it completes. Ctrl-C cancels cleanly; --resume "
        "then runs only what is not completed yet. An OUTPUT that holds an earlier job's "
        "results needs --resume or --mode. Exit status: 0 if every item completed, "
        "1 if some failed, 130 if interrupted. An agent's item is a string, a message, or an "
        'object with "input" (and "session_id", "user_id", "key" or "id"): docs/batch.md.',
    )
    batch.add_argument("target", metavar="MODULE:AGENT", help="e.g. mypackage.bots:summariser")
    batch.add_argument("input", metavar="INPUT", help="a .jsonl, .csv or .parquet file")
    batch.add_argument(
        "--model",
        default=None,
        metavar="PROVIDER:NAME",
        help="run the agent on this model instead of its own (openai:, openai-responses:, "
        "anthropic:, gemini:, vertex:, bedrock:), keyed and addressed from the environment "
        "as the provider's SDK is (e.g. gemini:gemini-2.5-flash, GEMINI_API_KEY)",
    )
    batch.add_argument(
        "-o",
        "--output",
        default=None,
        help="a .jsonl file or a .parquet directory (needed but with --estimate)",
    )
    batch.add_argument("--concurrency", type=int, default=None, help="runs in flight at once")
    batch.add_argument("--retries", type=int, default=None, help="retries per item (K+1 tries)")
    batch.add_argument(
        "--resume",
        action="store_true",
        help="go on with the job that wrote OUTPUT: skip the items it completed",
    )
    batch.add_argument(
        "--mode",
        choices=["error", "overwrite", "append"],
        default=None,
        help="when OUTPUT holds an earlier job's results: stop (error, the default), "
        "replace them (overwrite), or add this job's after them (append)",
    )
    batch.add_argument("--item-key", default=None, help="the field that keys an item")
    batch.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    batch.add_argument(
        "--provider-batch",
        action="store_true",
        help="send the model requests through the providers' batch APIs (half the price,"
        " answered within 24 h; OUTPUT keeps the batches for --resume)",
    )
    batch.add_argument(
        "--poll-seconds",
        type=float,
        default=None,
        help="with --provider-batch: how often batches are polled (default 30)",
    )
    batch.add_argument(
        "--gather-seconds",
        type=float,
        default=None,
        help="with --provider-batch: how long requests are gathered into a batch (default 5)",
    )
    batch.add_argument(
        "--max-waiting",
        type=int,
        default=None,
        help="with --provider-batch: the most items in flight, waiting for their lines or"
        " not (default: one batch's lines; --concurrency bounds those working)",
    )
    batch.add_argument(
        "--deadline",
        default=None,
        metavar="WHEN",
        help="when the job must be done: a span from now (6h, 90m, 1h30m) or an ISO "
        "datetime; each item goes the cheapest way that meets it (provider batch, flex, "
        "standard, priority; with --provider-batch, that tunes the batches)",
    )
    batch.add_argument(
        "--cache",
        default=None,
        metavar="STORE",
        help="answer requests seen before from a response cache kept in STORE: a SQLite "
        "file, redis://..., postgresql://..., or 'memory' (this process only)",
    )
    batch.add_argument(
        "--cache-ttl", type=float, default=None, help="seconds a cached reply is kept"
    )
    batch.add_argument(
        "--budget-usd", type=float, default=None, help="the whole job's budget in USD"
    )
    batch.add_argument(
        "--fail-on-tool-error",
        action="store_true",
        help="an item whose run has a failed tool call fails (TOOL_EXECUTION) instead of "
        "the model reading the error and going on",
    )
    batch.add_argument(
        "--estimate",
        action="store_true",
        help="run a random sample of the job (--sample items) and print its projected "
        "cost, tokens and time; nothing else runs",
    )
    batch.add_argument(
        "--confirm-over",
        type=float,
        default=None,
        metavar="USD",
        help="estimate first, and ask before running a job estimated over USD",
    )
    batch.add_argument("--sample", type=int, default=50, help="items an estimate runs")
    batch.add_argument(
        "--service-tier",
        default=None,
        metavar="TIER",
        help="the service tier of every request (e.g. flex, priority; the provider's "
        "names), over the agent's and its model's own; not with --provider-batch",
    )
    batch.add_argument(
        "--model-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a model option of every run, over the agent's (repeatable; VALUE is read "
        "as JSON when it is JSON, else as a string): e.g. max_tokens=512, "
        'temperature=0.2, reasoning=\'{"effort": "low"}\'',
    )
    batch.add_argument(
        "--backend",
        choices=["ray", "local"],
        default=None,
        help="where agents built without backend= run (default: $RAYGENT_BACKEND, else ray)",
    )
    batch.set_defaults(run=_run_batch)


def _run_batch(args: argparse.Namespace) -> int:
    from ._batch.cli import run_batch_command

    return run_batch_command(args)


def _run_demo(args: argparse.Namespace) -> int:
    import asyncio

    from .demo import run_demo

    result = asyncio.run(
        run_demo(
            latency_ms=args.latency_ms,
            items=args.items,
            out=args.out,
            concurrency=args.concurrency,
            provider=args.provider,
        )
    )
    return 0 if result.ok else 1


def _run_sim(args: argparse.Namespace) -> int:
    # Imported here so other subcommands do not pay for aiohttp.
    from .sim import Latency, SimRateLimits, serve

    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    latency = Latency(
        fixed_ms=args.latency_ms, per_token_ms=args.per_token_ms, jitter_ms=args.jitter_ms
    )
    try:
        with serve(
            args.script,
            host=args.host,
            port=args.port,
            latency=latency,
            max_concurrency=args.max_concurrency,
            rate_limits=SimRateLimits(
                requests_per_minute=args.rpm,
                tokens_per_minute=args.tpm,
                input_tokens_per_minute=args.itpm,
                output_tokens_per_minute=args.otpm,
                burst_seconds=args.burst_seconds,
                window_seconds=args.window_seconds,
            ),
            context_window=args.context_window,
            fault_rate=args.fault_rate,
            seed=args.seed,
        ) as sim:
            print(f"raygent sim listening on {sim.url}", flush=True)
            print(f"OPENAI_BASE_URL={sim.openai_base_url}", flush=True)
            print(f"ANTHROPIC_BASE_URL={sim.anthropic_base_url}", flush=True)
            # What google-genai reads for the Gemini API and Vertex AI.
            print(f"GOOGLE_GEMINI_BASE_URL={sim.gemini_base_url}", flush=True)
            print(f"GOOGLE_VERTEX_BASE_URL={sim.gemini_base_url}", flush=True)
            # What botocore reads for Bedrock's runtime (Converse) and control plane.
            print(f"AWS_ENDPOINT_URL_BEDROCK_RUNTIME={sim.url}", flush=True)
            print(f"AWS_ENDPOINT_URL_BEDROCK={sim.url}", flush=True)
            stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("raygent sim stopped", file=sys.stderr, flush=True)
    return 0
