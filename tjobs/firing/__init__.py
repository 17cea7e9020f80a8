"""The firing side of a node: cycle loading, the wheel tick, fire commits, compensation, retention.

- :mod:`tjobs.firing.wheel` — the hierarchical timing wheel holding the next instants of owned tasks.
- :mod:`tjobs.firing.planner` — what one fire does to its task (flows, next run; pure), run inside the
  fire transaction.
- :mod:`tjobs.firing.runner` — owns the wheel; loads owned jobs each cycle; commits due fires in
  batches and hands committed flows to the deliverer.
- :mod:`tjobs.firing.pacing` — spreads overdue (misfired) fires under a per-app rate.
- :mod:`tjobs.firing.compensator` — re-drives flows left non-terminal by a crash or a lost response.
- :mod:`tjobs.firing.retention` — purges old flows and finished tasks in small batches.

The compensator and retention run on :class:`tjobs.periodic.PeriodicPass`, the loop every background pass shares.
"""
