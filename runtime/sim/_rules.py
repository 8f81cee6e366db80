"""Choosing the reply for a request: compiled rule matchers and per-rule fire counts."""

from __future__ import annotations

import re
import threading

from ._plan import default_reply
from ._script import Match, Reply, Rule, Script
from ._types import ParsedRequest


class _CompiledRule:
    __slots__ = ("fired", "last_user", "match", "model", "rule", "system")

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.match: Match = rule.match
        self.last_user = _compile(rule.match.last_user)
        self.model = _compile(rule.match.model)
        self.system = _compile(rule.match.system)
        self.fired = 0

    def matches(self, req: ParsedRequest) -> bool:
        m = self.match
        if self.rule.times is not None and self.fired >= self.rule.times:
            return False
        if m.api is not None and m.api != req.api:
            return False
        if m.stream is not None and m.stream != req.stream:
            return False
        if m.has_tools is not None and m.has_tools != req.has_tools:
            return False
        if m.after_tool_result is not None and m.after_tool_result != req.after_tool_result:
            return False
        if self.model is not None and not self.model.search(req.model):
            return False
        if self.system is not None and not self.system.search(req.system_text):
            return False
        return self.last_user is None or (
            req.last_user_text is not None and bool(self.last_user.search(req.last_user_text))
        )

    def fire(self) -> Reply:
        reply = self.rule.reply
        n = self.fired
        self.fired += 1
        return reply[n % len(reply)] if isinstance(reply, list) else reply


def _compile(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern is not None else None


class RuleBook:
    """First matching rule wins; a lock makes :meth:`reset` safe from other threads."""

    def __init__(self, script: Script) -> None:
        self._rules = [_CompiledRule(rule) for rule in script.rules]
        self._default = script.default
        self._lock = threading.Lock()

    def choose(self, req: ParsedRequest) -> Reply:
        with self._lock:
            for rule in self._rules:
                if rule.matches(req):
                    return rule.fire()
        return self._default if self._default is not None else default_reply(req)

    def reset(self) -> None:
        with self._lock:
            for rule in self._rules:
                rule.fired = 0
