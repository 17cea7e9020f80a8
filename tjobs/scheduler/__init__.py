"""The firing side of a node: cycle loading, the wheel tick, fire commits, compensation, retention.

- :mod:`tjobs.scheduler.runner` — owns the wheel; loads owned jobs each cycle; commits due fires in
  batches and hands committed flows to the deliverer.
- :mod:`tjobs.scheduler.pacing` — spreads overdue (misfired) fires under a per-app rate.
- :mod:`tjobs.scheduler.compensator` — re-drives flows left non-terminal by a crash or a lost response.
- :mod:`tjobs.scheduler.retention` — purges old flows and finished tasks in small batches.
"""
