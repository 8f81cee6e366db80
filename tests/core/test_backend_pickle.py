"""Backends travel: an agent built on one is shipped to Ray workers by cloudpickle."""

from __future__ import annotations

import pickle

import ray.cloudpickle

import raygent
from raygent.seams.contract import Backend
from raygent.seams.local import LOCAL, LocalModelAccess
from raygent.testing import FunctionModel, reply


def test_local_backend_unpickles_as_the_process_own_local() -> None:
    assert pickle.loads(pickle.dumps(LOCAL)) is LOCAL
    assert ray.cloudpickle.loads(ray.cloudpickle.dumps(LOCAL)) is LOCAL


def test_a_custom_backend_copies_with_fresh_per_process_state() -> None:
    custom = Backend("custom", LocalModelAccess(), LOCAL.tools)
    copy = pickle.loads(pickle.dumps(custom))
    assert copy.name == "custom"
    assert isinstance(copy.models, LocalModelAccess) and copy.models is not custom.models


async def test_an_agent_on_the_local_backend_runs_after_a_round_trip() -> None:
    agent = raygent.agent(
        model=FunctionModel(lambda messages, options: reply("pong")), backend=LOCAL
    )
    await agent.execute("warm")  # per-loop state exists before pickling
    shipped = ray.cloudpickle.loads(ray.cloudpickle.dumps(agent))
    assert shipped.backend is LOCAL
    result = await shipped.execute("ping")
    assert result.ok and result.text == "pong", result.error
