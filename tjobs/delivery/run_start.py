"""How a target accepts an attempt as a job run instead of finishing it (README "Job runs",
docs/targets.md "Runs"): it answers ``202`` with the header ``tjobs-run: accepted``. A plain ``202`` (no
such header) is a delivery like any ``2xx``, as it always was. Only a flow with one destination (one URL,
one named target, or a pool in mode ``one``) can start a run: a run has one executor to report its end.

A broker's consumer answers nothing: a task naming one broker target with ``callback.run_on_publish``
says that the broker's acknowledgement of a publish starts the run (docs/targets.md "Runs from a
broker"); the message carries ``tjobs-run: report``, and the consumer ends the run by its report."""

from __future__ import annotations

from tjobs.delivery.transport import AttemptResult, Outcome
from tjobs.specs import CallbackSpec
from tjobs.specs.pool import Mode
from tjobs.targets.model import BROKER_PROTOCOLS

RUN_HEADER = "tjobs-run"
RUN_ACCEPTED = "accepted"
RUN_REPORT = "report"  # on a message whose publish starts a run (callback.run_on_publish)
RUN_STATUS_CODE = 202


def accepts_run(result: AttemptResult) -> bool:
    """Whether the answer to this send accepted it as a run."""
    answer = result.answer
    if result.outcome is not Outcome.DELIVERED or result.status != RUN_STATUS_CODE or answer is None:
        return False
    return any(n.lower() == RUN_HEADER and v.strip().lower() == RUN_ACCEPTED for n, v in answer.headers)


def starts_run(result: AttemptResult, callback: CallbackSpec, protocol: str | None) -> bool:
    """Whether this send, the flow's only one, starts a run: its answer accepted it, or its broker
    (``protocol``: the named target's) acknowledged the publish of a ``run_on_publish`` callback."""
    if not may_run(callback):
        return False
    if accepts_run(result):
        return True
    return callback.run_on_publish and result.outcome is Outcome.DELIVERED and protocol in BROKER_PROTOCOLS


def may_run(callback: CallbackSpec) -> bool:
    """Whether a flow of this callback has the one destination a run needs."""
    if callback.pool is not None:
        return callback.pool.mode is Mode.ONE
    return len(callback.urls) + len(callback.targets) == 1
