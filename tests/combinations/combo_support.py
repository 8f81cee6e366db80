"""What the combination matrix shares: a cell (one choice per dimension), the job each
cell runs (an agent with a tool, so two trips an item, on the simulator), and how to
read what the simulator was sent (online requests and the lines of the batch files)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

import raygent
from raygent import BedrockModel, Budget, Memory, OpenAIModel, Pricing, ResponseCache
from raygent.models import BedrockBatch
from raygent.sim import Fault, Match, Reply, Rule, Simulator, ToolCallReply
from raygent.sim._bedrock_auth import TEST_CREDENTIALS
from raygent.stores import SQLiteStore

# Declared prices, big so that an item costs ~0.16 USD online (~0.08 by batch).
PRICING = Pricing(input_per_mtok=1000.0, output_per_mtok=3000.0)
MAX_TOKENS = 20  # the output a request reserves against a budget
UP, DOWN = "gpt-4o-mini", "down-model"  # a fallback's first model is always down
# Bedrock's cells: a cross-region inference profile. A job of 8 items is under the 100
# records a batch inference job takes: its lines are gathered, then go online, noted.
BEDROCK_UP = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
BEDROCK_JOBS = BedrockBatch(
    s3_uri="s3://combinations/jobs", role_arn="arn:aws:iam::123456789012:role/r"
)
KEY = "sk-combinations"
# Binding whatever the mode: ~2 of the 8 items online, ~4 by batch (at half the price).
BUDGET_USD = 0.35
# Gathered and polled fast: a trip by batch takes a few tenths of a second.
PROVIDER_BATCH = raygent.ProviderBatch(gather_seconds=0.02, poll_seconds=0.01)

SCRIPT = [
    Rule(match=Match(model=f"^{DOWN}$"), reply=Reply(fault=Fault(kind="status", status=503))),
    Rule(match=Match(after_tool_result=True), reply=Reply(text="answered")),
    Rule(reply=Reply(tool_calls=[ToolCallReply("lookup", {"q": "x"})])),
]


@raygent.tool
def lookup(q: str) -> str:
    """Look a question up."""
    return "found " + q


@dataclass(frozen=True)
class Cell:
    """One combination: how trips go, cache, budget, sessions, fallback (the backend is
    the test's `backend_kind`)."""

    mode: str  # "online" | "batch"
    cache: bool
    budget: bool
    session: str | None  # None | "message" | "turn"
    fallback: bool
    provider: str = "openai"  # "openai" (Chat Completions) | "bedrock" (Converse)

    @property
    def up(self) -> str:
        """The model that answers (a fallback's second)."""
        return BEDROCK_UP if self.provider == "bedrock" else UP

    @property
    def id(self) -> str:
        parts = [
            *(["bedrock"] if self.provider == "bedrock" else []),
            self.mode,
            "cache" if self.cache else "nocache",
            "budget" if self.budget else "nobudget",
            self.session or "nosession",
            "fallback" if self.fallback else "single",
        ]
        return "-".join(parts)


CELLS = [
    Cell(mode, cache, budget, session, fallback)
    for mode in ("online", "batch")
    for cache in (False, True)
    for budget in (False, True)
    for session in (None, "message", "turn")
    for fallback in (False, True)
] + [
    # Bedrock in every combination but `message` sessions (as `turn`'s, for the wire).
    Cell(mode, cache, budget, session, fallback, provider="bedrock")
    for mode in ("online", "batch")
    for cache in (False, True)
    for budget in (False, True)
    for session in (None, "turn")
    for fallback in (False, True)
]


def items(cell: Cell) -> list[dict[str, Any]]:
    """Eight items; with sessions, items 0 and 2 share s0, items 1 and 3 share s1."""
    rows: list[dict[str, Any]] = []
    for i in range(8):
        row: dict[str, Any] = {"input": f"question {i}", "key": f"k{i}"}
        if cell.session is not None and i < 4:
            row["session_id"] = f"s{i % 2}"
        rows.append(row)
    return rows


SESSIONS = ("s0", "s1")


@dataclass
class Setup:
    """What a cell's two jobs share: the agent, its stores, the options."""

    agent: raygent.Agent
    sessions: SQLiteStore | None
    options: dict[str, Any]
    stores: list[SQLiteStore]

    async def close(self) -> None:
        for store in self.stores:
            await store.aclose()


def setup(cell: Cell, sim: Simulator, folder: Path) -> Setup:
    def model(name: str) -> Any:
        if cell.provider == "bedrock":
            return BedrockModel(
                name,
                region="us-east-1",
                base_url=sim.url,
                access_key=TEST_CREDENTIALS.access_key,
                secret_key=TEST_CREDENTIALS.secret_key,
                pricing=PRICING,
                batch=BEDROCK_JOBS,
            )
        return OpenAIModel(name, base_url=sim.openai_base_url, api_key=KEY, pricing=PRICING)

    up = model(cell.up)
    chosen: Any = raygent.fallback_model([model(DOWN), up]) if cell.fallback else up
    sessions = SQLiteStore(folder / "sessions.db") if cell.session is not None else None
    memory = Memory(sessions, cell.session) if sessions is not None else None  # type: ignore[arg-type]
    agent = raygent.agent(
        model=chosen, tools=[lookup], memory=memory, model_options={"max_tokens": MAX_TOKENS}
    )
    options: dict[str, Any] = {"progress": False}
    if cell.mode == "batch":
        options["provider_batch"] = PROVIDER_BATCH
    stores = [sessions] if sessions is not None else []
    if cell.cache:
        stores.append(SQLiteStore(folder / "cache.db"))
        options["cache"] = ResponseCache(stores[-1])
    return Setup(agent, sessions, options, stores)


def job_budget(cell: Cell) -> dict[str, Any]:
    """A fresh budget per job (a second job is a job of its own)."""
    return {"budget": Budget(usd=BUDGET_USD)} if cell.budget else {}


def sunk_keys(sink: Path) -> list[str]:
    return [json.loads(line)["key"] for line in sink.read_text().splitlines()]


class Sent:
    """What the simulator was sent for model answers: each online chat request's body
    and each line of each batch input file, as canonical JSON, per model name."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.files_before: set[str] = set()

    async def _batch_files(self) -> list[str]:
        async with httpx.AsyncClient() as client:
            reply = await client.get(
                f"{self.sim.openai_base_url}/files",
                params={"purpose": "batch"},
                headers={"authorization": f"Bearer {KEY}"},
            )
        return [f["id"] for f in reply.json()["data"]]

    async def start(self) -> None:
        """Before a job: forget the counters and records; note the files there are."""
        self.files_before = set(await self._batch_files())
        self.sim.reset()

    async def bodies(self) -> dict[str, list[str]]:
        """After a job: what it sent, per model name (call once its stats are read)."""
        found: dict[str, list[str]] = {}
        for record in self.sim.requests:
            if not isinstance(record.body, dict):
                continue
            if record.path.endswith("/chat/completions"):
                _add(found, record.body)
            elif record.path.startswith("/model/"):  # Bedrock's: the model in the path
                _add(found, record.body, record.path.split("/")[2])
        new = [f for f in await self._batch_files() if f not in self.files_before]
        async with httpx.AsyncClient() as client:
            for file_id in new:
                reply = await client.get(
                    f"{self.sim.openai_base_url}/files/{file_id}/content",
                    headers={"authorization": f"Bearer {KEY}"},
                )
                for line in reply.text.splitlines():
                    _add(found, json.loads(line)["body"])
        return found


def _add(found: dict[str, list[str]], body: dict[str, Any], model: str | None = None) -> None:
    # The delivery fields do not change the answer (an online stream and a batch line
    # of one request ask the same).
    asked = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    name = model or str(body.get("model"))
    found.setdefault(name, []).append(json.dumps(asked, sort_keys=True))


def turns(history: list[Any]) -> str:
    """A stored history as its turns: "u" a user message, "a" an assistant reply with
    the tool calls and results before it folded in. Checks that each tool result
    answers a call of the assistant message before it."""
    shape: list[str] = []
    calls: set[str] = set()
    for message in history:
        if message.role == "tool":
            assert message.call_id in calls, f"a tool result with no call before it: {history}"
            continue
        if message.role == "assistant":
            calls = {call.call_id for call in message.tool_calls or ()}
            if shape and shape[-1] == "a":
                continue
            shape.append("a")
        else:
            calls = set()
            shape.append("u")
    return "".join(shape)
