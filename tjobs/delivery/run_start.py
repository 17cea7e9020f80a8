"""How a target accepts an attempt as a job run instead of finishing it (README "Job runs",
docs/targets.md "Runs"): it answers ``202`` with the header ``tjobs-run: accepted``. A plain ``202`` (no
such header) is a delivery like any ``2xx``, as it always was. Only a flow with one destination (one URL,
one named target, or a pool in mode ``one``) can start a run: a run has one executor to report its end."""

from __future__ import annotations

from tjobs.delivery.transport import AttemptResult, Outcome
from tjobs.specs import CallbackSpec
from tjobs.specs.pool import Mode

RUN_HEADER = "tjobs-run"
RUN_ACCEPTED = "accepted"
RUN_STATUS_CODE = 202


def accepts_run(result: AttemptResult) -> bool:
    """Whether the answer to this send accepted it as a run."""
    answer = result.answer
    if result.outcome is not Outcome.DELIVERED or result.status != RUN_STATUS_CODE or answer is None:
        return False
    return any(n.lower() == RUN_HEADER and v.strip().lower() == RUN_ACCEPTED for n, v in answer.headers)


def may_run(callback: CallbackSpec) -> bool:
    """Whether a flow of this callback has the one destination a run needs."""
    if callback.pool is not None:
        return callback.pool.mode is Mode.ONE
    return len(callback.urls) + len(callback.targets) == 1
