"""Output-token limits and `max_tokens`: a job whose requests reserve far more output
than they use, against the same job reserving only what it uses.

Anthropic counts a request's `max_tokens` against its output tokens per minute when it
admits it, and gives back what the reply did not use. A client holding that limit must
give it back too, and let the requests waiting for room go when it comes back; else it
sends as if every reply used its whole `max_tokens`. The simulator (its own process)
states the limits in Anthropic's headers; nothing is configured on the model, so the
limits are learnt from them, as a user meets them. Each case runs `--items` one-trip
items at once through `raygent.agent(...).execute` with `max_tokens` of `--reserve`,
and the same with `max_tokens` of `--used` (about what each reply uses), in alternating
order.
Printed per round: the seconds each took, their ratio (1.0: what was not used came back
at once), and the 429s.

    python benchmarks/bench_rate_refunds.py [--backend local|ray] [--otpm 60000]
        [--items 40] [--reserve 500] [--used 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from _sim_process import sim_process, sim_stats

KEY = "sk-bench"


async def _job(base: str, items: int, max_tokens: int) -> float:
    import raygent

    model = raygent.AnthropicModel("claude-sonnet-4-5", api_key=KEY, base_url=base)
    bot = raygent.agent(model=model, model_options={"max_tokens": max_tokens})
    started = time.perf_counter()
    results = await asyncio.gather(*(bot.execute(f"question {i}") for i in range(items)))
    seconds = time.perf_counter() - started
    failed = [r for r in results if not r.ok]
    if failed:
        raise SystemExit(f"{len(failed)} items failed: {failed[0].error!r}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    parser.add_argument("--otpm", type=int, default=60_000)
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--reserve", type=int, default=500)
    parser.add_argument("--used", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ["RAYGENT_BACKEND"] = args.backend
    print(
        f"{args.backend}: {args.items} items at once, {args.otpm} output tokens a minute"
        f" learnt from Anthropic's headers; max_tokens {args.reserve} against {args.used}"
    )
    with sim_process() as base:  # imports, the first client and (on Ray) Ray itself
        asyncio.run(_job(base, 2, args.used))
    print("round  reserve s  used s  ratio  429s")
    ratios = []
    for round_ in range(1, args.rounds + 1):
        # A simulator per round: each starts from a full minute, and learns afresh.
        figures = {}
        order = (args.reserve, args.used) if round_ % 2 else (args.used, args.reserve)
        for max_tokens in order:
            with sim_process("--otpm", str(args.otpm), "--itpm", str(args.otpm * 10)) as base:
                seconds = asyncio.run(_job(base, args.items, max_tokens))
                stats = asyncio.run(sim_stats(base))
            limited = sum(stats.get("rate_limited", {}).values())
            figures[max_tokens] = (seconds, limited)
        (reserve_s, reserve_429), (used_s, used_429) = figures[args.reserve], figures[args.used]
        ratio = reserve_s / used_s
        ratios.append(ratio)
        print(
            f"{round_:>5}  {reserve_s:9.2f}  {used_s:6.2f}  {ratio:5.2f}  {reserve_429}/{used_429}"
        )
    print(
        f"median ratio {sorted(ratios)[len(ratios) // 2]:.2f} (1.0: unused max_tokens back at once)"
    )
    print(f"load average now: {os.getloadavg()[0]:.2f}")
    print("reproduce: python " + " ".join([sys.argv[0], *sys.argv[1:]]))


if __name__ == "__main__":
    main()
