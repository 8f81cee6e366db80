"""Runs a durable agent once (the test kills it part-way): argv[1] is the JSON config."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from durable_support import build_agent, wait_for_file_lines


async def main(config: dict[str, Any]) -> None:
    agent = build_agent(config)
    if config.get("mode") == "resume":
        # Both resuming children start together: each says it is ready, then waits.
        barrier = Path(config["barrier"])
        (barrier / f"ready-{config['name']}").write_text("ready")
        wait_for_file_lines(barrier / "go", 1, timeout=60)
        result = await agent.resume(str(config["run_id"]))
    else:
        result = await agent.execute(
            str(config["input"]), run_id=str(config["run_id"]), session_id=config.get("session_id")
        )
    error = None if result.error is None else type(result.error).__name__
    print(json.dumps({"status": result.status, "text": result.text, "error": error}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
