"""`import raygent` loads only what every process needs: a client a process may never
use (redis-py, aiohttp, jsonschema) is imported where it is first used, so every Ray
worker, session host and CLI call that imports raygent starts without it."""

from __future__ import annotations

import json
import subprocess
import sys

from raygent.sim import serve

HEAVY = ["redis", "aiohttp", "httpx_aiohttp", "jsonschema", "psycopg", "mcp", "ray"]

SCRIPT = """
import asyncio, json, sys
heavy = json.loads(sys.argv[1])

def loaded():
    return [m for m in heavy if sys.modules.get(m) is not None]

import raygent
seen = {"import raygent": loaded()}

from raygent.stores import RedisStore
from raygent.testing import ScriptedModel
import raygent.stores.redis
seen["RedisStore named"] = loaded()
seen["same class"] = RedisStore is raygent.stores.redis.RedisStore

checker = raygent.agent(
    model=ScriptedModel(['{"n": 1}']),
    output={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    backend=raygent.seams.LOCAL,
)
seen["schema output"] = asyncio.run(checker.execute("n?")).data
seen["after a dict schema"] = loaded()

bot = raygent.agent(
    model=raygent.OpenAIModel("sim-gpt", base_url=sys.argv[2] + "/v1", api_key="sk-test"),
    backend=raygent.seams.LOCAL,
)
seen["answer"] = asyncio.run(bot.execute("hello")).text
seen["after a model call"] = loaded()
print(json.dumps(seen))
"""


def test_import_raygent_leaves_each_client_to_the_process_that_uses_it() -> None:
    with serve({"rules": [{"reply": ["hi there"]}]}) as sim:
        result = subprocess.run(
            [sys.executable, "-c", SCRIPT, json.dumps(HEAVY), sim.url],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["import raygent"] == []
    # Each is imported where it is first used, and then works as before.
    assert seen["RedisStore named"] == ["redis"]
    assert seen["same class"] is True
    assert seen["schema output"] == {"n": 1}
    assert seen["after a dict schema"] == ["redis", "jsonschema"]
    assert seen["answer"] == "hi there"
    # A model call sends on aiohttp itself (httpx's aiohttp transport is not loaded).
    assert seen["after a model call"] == ["redis", "aiohttp", "jsonschema"]
