"""An operator job's page (today: a redrive of every matching dead letter): its progress, processed of
total and failures, refreshed while it is open and the same after a reload (the job lives in the store,
not in the page); cancelling it (after its batch in progress)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from tjobs.console.context import ConsoleRoute, Principal, console_of
from tjobs.service.operator_jobs import job_json

router = APIRouter(route_class=ConsoleRoute)


async def _job(request: Request, principal: Principal, job_id: str) -> dict[str, Any]:
    """The job as the pages show it: an app session's own (another app's: 404), any app's for the admin."""
    return job_json(await console_of(request).node.operator_jobs.get(_app_id(principal), job_id))


def _app_id(principal: Principal) -> str | None:
    return None if principal.app is None else principal.app.id


@router.get("/console/operator-jobs/{job_id}")
async def job_page(request: Request, job_id: str) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    job = await _job(request, principal, job_id)
    return console.render(request, "operator_job.html", principal, job=job)


@router.get("/console/operator-jobs/{job_id}/progress")
async def job_progress(request: Request, job_id: str) -> Response:
    """The progress part of the page, for its refresh."""
    console = console_of(request)
    principal = await console.principal(request)
    job = await _job(request, principal, job_id)
    return console.render(request, "_operator_job.html", principal, job=job)


@router.post("/console/operator-jobs/{job_id}/cancel")
async def job_cancel(request: Request, job_id: str) -> Response:
    console = console_of(request)
    principal, _ = await console.posted(request)
    await console.node.operator_jobs.cancel(_app_id(principal), job_id)
    return RedirectResponse(f"/console/operator-jobs/{job_id}", status_code=303)
