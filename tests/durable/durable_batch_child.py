"""Runs a durable batch (the test kills this driver part-way): argv[1] is the config."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from durable_support import batch_items, build_agent, build_store

import raygent


async def main(config: dict[str, Any]) -> None:
    agent = build_agent(config)
    store = build_store(config["store"])
    result = await raygent.batch(
        agent,
        batch_items(config["items"]),
        concurrency=config["concurrency"],
        sink=config["sink"],
        durable=raygent.Durable(store=store, delete_on_complete=False),
        progress=False,
    )
    print(json.dumps({"ok": result.ok}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
