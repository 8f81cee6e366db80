"""Runs the durable workflow once (the test kills it during `review`): argv[1] is the
JSON config."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from durable_flow_support import build_workflow


async def main(config: dict[str, Any]) -> None:
    result = await build_workflow(config).execute("Write about tides.", run_id=config["run_id"])
    print(json.dumps({"status": result.status}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
