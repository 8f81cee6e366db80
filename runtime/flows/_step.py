"""`raygent.step(...)`: one step of a workflow, checked when it is built."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel

from ..executable import is_executable
from ..seams.retry import Retry
from ._markers import END, _End
from ._state import WorkflowState

__all__ = ["Branches", "Next", "Step", "step"]

StepKind: TypeAlias = Literal["run", "agent", "parallel"]
# Where a step goes next: a step's name, END, or None (the next step in order).
Next: TypeAlias = "str | _End | Callable[[WorkflowState], Any] | None"
Branches: TypeAlias = (
    "Mapping[str, Any] | Iterable[Any]"  # executables, (name, executable) pairs, or a dict
)


class Step:
    """One step of a workflow; build it with `raygent.step(...)` (see there)."""

    def __init__(
        self,
        name: str,
        *,
        kind: StepKind,
        run: Callable[[WorkflowState], Any] | None,
        agent: Any,
        branches: dict[str, Any] | None,
        input: Callable[[WorkflowState], Any] | None,
        skip: Callable[[WorkflowState], Any] | None,
        before: Callable[[WorkflowState], Any] | None,
        after: Callable[[WorkflowState, Any], Any] | None,
        output: Callable[[Any], Any] | type[BaseModel] | None,
        next: Next,
        retry: Retry | None,
        on_failure: Callable[[WorkflowState, BaseException], Any] | None,
    ) -> None:
        self.name = name
        self.kind: StepKind = kind
        self.run = run
        self.agent = agent
        self.branches = branches
        self.input = input
        self.skip = skip
        self.before = before
        self.after = after
        self.output = output
        self.next = next
        self.retry = retry
        self.on_failure = on_failure

    @property
    def schema(self) -> type[BaseModel] | None:
        """The pydantic model the step's output is validated by, if it has one."""
        output = self.output
        return output if isinstance(output, type) and issubclass(output, BaseModel) else None

    def __repr__(self) -> str:
        return f"Step(name={self.name!r}, kind={self.kind!r})"


def step(
    name: str,
    *,
    run: Callable[[WorkflowState], Any] | None = None,
    agent: Any = None,
    parallel: Branches | None = None,
    input: Callable[[WorkflowState], Any] | None = None,
    skip: Callable[[WorkflowState], Any] | None = None,
    before: Callable[[WorkflowState], Any] | None = None,
    after: Callable[[WorkflowState, Any], Any] | None = None,
    output: Callable[[Any], Any] | type[BaseModel] | None = None,
    next: Next = None,
    retry: Retry | None = None,
    on_failure: Callable[[WorkflowState, BaseException], Any] | None = None,
) -> Step:
    """One step of a workflow: exactly one of `run=`, `agent=` or `parallel=`.

    - `run=fn(state)`: a function, sync (run in a worker thread, off the event loop) or
      async; what it returns is the step's output.
    - `agent=executable`: an agent, workflow or supervisor run as a child run (its report
      under the step, its usage counted). Its input is `input=fn(state)`, else the
      previous step's output (the workflow's input for the first step). A workflow or
      supervisor gets it as is; an agent gets a model as its JSON, and a previous output
      that is not text as JSON (what `input=` gives otherwise goes as is: text or
      messages).
    - `parallel=[...]`: executables run at once, each a child run; a list of
      executables (named by their `name`), of `(name, executable)` pairs, or a dict
      `{name: executable}`. All get the same input (as for `agent=`). The step's output is
      a dict keyed by branch name. When one branch fails the others are aborted (their
      runs end cancelled; their usage still counts) and the step fails.

    The lifecycle: `skip(state)` true skips the step (status "skipped"; the run goes on
    to the next step in order) -> `before(state)` -> the run -> the output extracted ->
    `after(state, output)` -> `next`. Hooks may be sync (called on the loop: keep them
    quick) or async.

    - `output=`: a pydantic model validates the output (a dict, JSON text or the model;
      an agent's `result.data` when it is already that model, else its text as JSON;
      each branch's for a parallel step): a mismatch is a FlowOutputError. Or a function
      of the raw value (the function's return, the child's result, a dict of branch
      results) giving the output. Without it: the function's return, the child's
      `data` (its `text` when it has no structured output), a dict of those by branch.
    - `next=`: a step's name, `raygent.END`, or `fn(state)` giving either (or a
      `raygent.Goto`; None: the next step in order). Steps may be revisited; the
      workflow's `max_steps` bounds loops.
    - `retry=raygent.Retry(...)`: the run and the extraction are tried again when the
      error is retryable by `Retry.should_retry`, after `Retry.delay` (every attempt's
      usage counted).
    - `on_failure=fn(state, error)`: after the retries, returns `raygent.Goto(name)` (go
      there), `raygent.END` (end the workflow, completed, with what the steps made so
      far), or None / raises (the workflow fails: StepFailedError, or FlowOutputError for
      an output mismatch).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"a step needs a name, not {name!r}")
    given = [
        label
        for label, value in (("run", run), ("agent", agent), ("parallel", parallel))
        if value is not None
    ]
    if len(given) != 1:
        raise TypeError(
            f"step {name!r} takes exactly one of run=, agent= or parallel=, "
            f"not {', '.join(given) or 'none'}"
        )
    kind: StepKind = given[0]  # type: ignore[assignment]
    if run is not None and not callable(run):
        raise TypeError(f"step {name!r}: run= takes a function of the state, not {run!r}")
    if agent is not None and not is_executable(agent):
        raise TypeError(
            f"step {name!r}: agent= takes an agent, workflow or supervisor, not {agent!r}"
        )
    if input is not None and kind == "run":
        raise TypeError(f"step {name!r}: input= is for agent= and parallel= (run= reads state)")
    for label, hook in (
        ("input", input),
        ("skip", skip),
        ("before", before),
        ("after", after),
        ("on_failure", on_failure),
    ):
        if hook is not None and not callable(hook):
            raise TypeError(f"step {name!r}: {label}= takes a function, not {hook!r}")
    if output is not None and not callable(output):
        raise TypeError(f"step {name!r}: output= takes a pydantic model or a function")
    if not (next is None or next is END or isinstance(next, str) or callable(next)):
        raise TypeError(f"step {name!r}: next= takes a step's name, raygent.END or a function")
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError(f"step {name!r}: retry= takes raygent.Retry(...), not {retry!r}")
    return Step(
        name,
        kind=kind,
        run=run,
        agent=agent,
        branches=None if parallel is None else _branches(name, parallel),
        input=input,
        skip=skip,
        before=before,
        after=after,
        output=output,
        next=next,
        retry=retry,
        on_failure=on_failure,
    )


def _branches(step_name: str, parallel: Branches) -> dict[str, Any]:
    """The branches by name, each an executable."""
    if isinstance(parallel, Mapping):
        pairs = [(str(key), value) for key, value in parallel.items()]
    elif isinstance(parallel, (str, bytes)) or not isinstance(parallel, Iterable):
        raise TypeError(f"step {step_name!r}: parallel= takes a list or a dict of executables")
    else:
        pairs = []
        for item in parallel:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                pairs.append((item[0], item[1]))
            else:
                pairs.append((str(getattr(item, "name", "")), item))
    if not pairs:
        raise TypeError(f"step {step_name!r}: parallel= needs at least one branch")
    branches: dict[str, Any] = {}
    for branch, executable in pairs:
        if not is_executable(executable):
            raise TypeError(
                f"step {step_name!r}: a parallel branch is an agent, workflow or "
                f"supervisor, not {executable!r}"
            )
        if not branch:
            raise TypeError(f"step {step_name!r}: a parallel branch needs a name")
        if branch in branches:
            raise TypeError(
                f"step {step_name!r}: two parallel branches are named {branch!r} "
                "(name them: parallel={'a': ..., 'b': ...})"
            )
        branches[branch] = executable
    return branches
