"""raygent imports and runs without its optional extras; a store that needs one says
which when it is named."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
sys.modules["psycopg"] = None  # as if the postgres extra were not installed
sys.modules["psycopg_pool"] = None
import asyncio
import raygent
from raygent.stores import SQLiteStore
from raygent.testing import ScriptedModel
assert "psycopg" not in [m for m, v in sys.modules.items() if v is not None]
bot = raygent.agent(model=ScriptedModel(["hi"]), backend=raygent.seams.LOCAL)
print(asyncio.run(bot.execute("hello")).text)
try:
    from raygent.stores import PostgresStore
except ImportError as exc:
    print("error:", exc)
"""


def printed(script: str) -> list[str]:
    """The lines a fresh interpreter running `script` printed (it must exit cleanly)."""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_raygent_runs_without_the_postgres_extra_and_says_what_is_missing() -> None:
    lines = printed(SCRIPT)
    assert lines[0] == "hi"
    assert (
        lines[1] == "error: PostgresStore needs the postgres extra: pip install 'raygent[postgres]'"
    )


MCP_SCRIPT = """
import sys
sys.modules["mcp"] = None  # as if the mcp extra were not installed
import raygent
assert "raygent.mcp" not in sys.modules  # raygent alone never loads it
try:
    import raygent.mcp
except ImportError as exc:
    print("error:", exc)
"""


def test_raygent_mcp_says_which_extra_it_needs() -> None:
    assert printed(MCP_SCRIPT) == [
        "error: raygent.mcp needs the mcp extra: pip install 'raygent[mcp]'"
    ]


DATA_SCRIPT = """
import sys
sys.modules["pandas"] = None  # as if the data extra were not installed (Ray Data needs it)
import raygent
async def shout(text):
    return text.upper()
try:
    raygent.data.map(None, shout)
except ImportError as exc:
    print("error:", exc)
"""


def test_raygent_data_map_says_which_extra_it_needs() -> None:
    assert printed(DATA_SCRIPT) == [
        "error: raygent.data.map needs the data extra: pip install 'raygent[data]'"
    ]
