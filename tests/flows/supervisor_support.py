"""Shared helpers for the supervisor tests: models against the simulator, in-process
intents that echo or fail, and an event recorder."""

from __future__ import annotations

from typing import Any

from raygent import AnthropicModel, OpenAIModel, agent
from raygent.agents import Agent
from raygent.messages import Message
from raygent.models._http import HTTPModel
from raygent.models.contract import ModelOptions
from raygent.observers.events import Event
from raygent.sim import Simulator
from raygent.testing import FunctionModel, ScriptedModel

KEY = "sk-test-key-000000"
PROVIDERS = ("openai", "anthropic")


def sim_model(provider: str, sim: Simulator, **kwargs: Any) -> HTTPModel:
    """A real adapter aimed at the simulator."""
    kwargs.setdefault("api_key", KEY)
    if provider == "openai":
        return OpenAIModel("sim-gpt", base_url=sim.openai_base_url, **kwargs)
    return AnthropicModel("sim-claude", base_url=sim.anthropic_base_url, **kwargs)


def echo(name: str) -> Agent:
    """An agent answering `<name>: <its input>` (no HTTP)."""

    def answer(messages: list[Message], options: ModelOptions) -> str:
        return f"{name}: {messages[-1].text}"

    return agent(name=name, model=FunctionModel(answer))


def scripted(name: str, *replies: Any) -> Agent:
    """An agent answering with `replies` in turn (exceptions raised)."""
    return agent(name=name, model=ScriptedModel(list(replies)))


class Recorder:
    """An event handler that keeps every event it sees."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]
