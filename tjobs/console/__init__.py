"""The web console at ``/console``: server-rendered pages over the node's services, served by the API app.

Pages are Jinja2 templates (``templates/``) with one stylesheet and one small script (``static/``); no
build step. Every page works without JavaScript: the script only refreshes a task's flows while the
page is open and offers "select all" on dead letters.

Who sees what, sessions, CSRF and the 404-for-foreign-ids rule are written once, in
:mod:`tjobs.console.context` and :mod:`tjobs.console.session`. The pages (one module per area):

- ``pages_session``: sign in (an app key, the admin key, or a user and password), sign out, the static
  files;
- ``pages_overview``: per app fire rate, lateness, reach, dead letters, with charts on a UTC time axis,
  refreshed in place while open; a warning for each pool flows found without executors;
- ``pages_pools``: the app's executor pools and their live executors (last heartbeat, lease expiry,
  callbacks in flight), and the empty-pool warning;
- ``pages_tasks``: the task list, a task (its schedule's next instants, flows), pause / resume /
  trigger / edit / delete, each confirmed;
- ``pages_schedules``: the next instants of any schedule (the schedule preview);
- ``pages_flows``: the flow search (by task name, time presets, a total, CSV export), the dead letters
  (newest first, filtered) and their redrive, the chosen ones or all matching as one server-side job;
- ``pages_operator_jobs``: such a job's progress (it lives in the store: a reload shows where it is), cancel;
- ``pages_flow_detail``: one flow, what was sent and every attempt's answer;
- ``pages_targets``: the app's named delivery targets, one target (credentials only as set or not
  set), deleting one (confirmed);
- ``pages_apps`` (admin): create, limits, rotate key or secret (a new key or secret is shown once);
- ``pages_alerts``: what fires, the alert rules and channels (an app's own; the admin's: all);
- ``pages_cluster`` (admin): nodes with every node's runtime figures (as each published them), job
  groups, the plan, database servers, the hot tier;
- ``pages_users`` (admin): the operator accounts and the live console sessions, each revocable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from tjobs.console.context import Console
from tjobs.console.error_pages import install_error_pages

if TYPE_CHECKING:
    from tjobs.node import Node

__all__ = ["include_console"]


def include_console(api: FastAPI, node: Node) -> None:
    """Serve the console on ``api`` (unless ``console.enabled`` is false)."""
    if not node.settings.console.enabled:
        return
    from tjobs.console import (
        pages_alerts,
        pages_apps,
        pages_audit,
        pages_cluster,
        pages_flow_detail,
        pages_flows,
        pages_oidc,
        pages_operator_jobs,
        pages_overview,
        pages_pools,
        pages_schedules,
        pages_session,
        pages_targets,
        pages_tasks,
        pages_users,
    )

    api.state.console = Console(node, api.state.app_service, api.state.rate_limits, api.state.credential_limits)
    pages = (
        pages_session,
        pages_overview,
        pages_tasks,
        pages_schedules,
        pages_flows,
        pages_flow_detail,  # after pages_flows: /console/flows/{flow_id} must not shadow its paths
        pages_operator_jobs,
        pages_targets,
        pages_pools,
        pages_alerts,
        pages_apps,
        pages_audit,
        pages_cluster,
        pages_users,
        pages_oidc,
    )
    for module in pages:
        api.include_router(module.router, include_in_schema=False)
    install_error_pages(api)  # an unknown /console path: the console's 404 page, not the API's JSON
