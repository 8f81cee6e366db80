"""A durable workflow for the crash tests: `draft` (an agent on the simulator), `review`
(a function that leaves a mark and, in the process the test kills, waits for ever),
`publish` (an agent). Built the same way in the killed child and in the test."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import raygent
from raygent import Pricing
from raygent.stores import RedisStore, SQLiteStore

HERE = Path(__file__).resolve().parent
PRICING = Pricing(input_per_mtok=1.0, output_per_mtok=2.0)


class Review(BaseModel):
    verdict: str
    visit: int


# Stores this process opened: the tests close them after each test.
OPENED: list[Any] = []


def build_store(spec: dict[str, Any]) -> Any:
    store: Any
    if spec["kind"] == "sqlite":
        store = SQLiteStore(spec["path"])
    else:
        store = RedisStore(spec["url"], prefix=spec["prefix"])
    OPENED.append(store)
    return store


def build_workflow(config: dict[str, Any], *, extra_step: bool = False) -> raygent.Workflow:
    model = raygent.OpenAIModel(
        "sim-gpt", base_url=config["openai_url"], api_key="sk-flow", pricing=PRICING
    )
    writer = raygent.agent(name="writer", model=model, system_prompt="Write.")
    marks = Path(config["marks"])

    async def review(state: raygent.WorkflowState) -> Review:
        with (marks / "review").open("a") as f:
            f.write(f"{os.getpid()}\n")
        if config.get("hang_review"):
            await asyncio.Event().wait()  # the test kills this process here
        return Review(verdict=f"approved: {state.last}", visit=state.visit)

    steps = [
        raygent.step("draft", agent=writer),
        raygent.step("review", run=review, output=Review),
        raygent.step("publish", agent=writer, input=lambda s: s.outputs["review"].verdict),
    ]
    if extra_step:
        steps.append(raygent.step("notify", run=lambda s: "sent"))
    return raygent.workflow(
        name="publisher",
        steps=steps,
        durable=raygent.Durable(store=build_store(config["store"]), delete_on_complete=False),
    )


def spawn(config: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "workflow_child.py"), json.dumps(config)],
        env={**os.environ, "RAYGENT_BACKEND": "local"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
