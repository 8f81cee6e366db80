"""The ``raygent`` command line: one subcommand per tool (``raygent sim``, ``raygent demo``)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run the chosen subcommand."""
    parser = argparse.ArgumentParser(prog="raygent", description="raygent command line")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_sim(commands)
    _add_demo(commands)
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    return run(args)


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
    sim.add_argument("--context-window", type=int, default=None, help="400 beyond N tokens")
    sim.add_argument("--fault-rate", type=float, default=0.0, help="share of 500 responses")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--script", default=None, help="YAML or JSON script file")
    sim.set_defaults(run=_run_sim)


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="run an agent against the built-in provider simulator (no key, no network)",
        description="Start the simulator in-process and run an agent with a tool and "
        "structured output against it.",
    )
    demo.add_argument("--latency-ms", type=float, default=50.0, help="simulated latency")
    demo.set_defaults(run=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    import asyncio

    from .demo import run_demo

    asyncio.run(run_demo(latency_ms=args.latency_ms))
    return 0


def _run_sim(args: argparse.Namespace) -> int:
    # Imported here so other subcommands do not pay for aiohttp.
    from .sim import Latency, serve

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
            requests_per_minute=args.rpm,
            context_window=args.context_window,
            fault_rate=args.fault_rate,
            seed=args.seed,
        ) as sim:
            print(f"raygent sim listening on {sim.url}", flush=True)
            print(f"OPENAI_BASE_URL={sim.openai_base_url}", flush=True)
            print(f"ANTHROPIC_BASE_URL={sim.anthropic_base_url}", flush=True)
            stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("raygent sim stopped", file=sys.stderr, flush=True)
    return 0
