"""An operator job's page (a redrive of every matching dead letter, or a backfill of a task's past
range): its progress, processed of total and failures, refreshed while it is open and the same after a
reload (the job lives in the store, not in the page); cancelling it (after its batch in progress)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from tjobs.console.context import ConsoleRoute, Principal, console_of
from tjobs.service.operator_jobs import job_json

router = APIRouter(route_class=ConsoleRoute)


def _app_id(principal: Principal) -> str | None:
    return None if principal.app is None else principal.app.id


@router.get("/console/operator-jobs/{job_id}")
async def job_page(request: Request, job_id: str) -> Response:
    return await _render(request, job_id, "operator_job.html")


@router.get("/console/operator-jobs/{job_id}/progress")
async def job_progress(request: Request, job_id: str) -> Response:
    """The progress part of the page, for its refresh."""
    return await _render(request, job_id, "_operator_job.html")


async def _render(request: Request, job_id: str, template: str) -> Response:
    """The job (as :func:`job_json` shows it) on ``template``: an app session's own (another app's:
    404), any app's for the admin."""
    console = console_of(request)
    principal = await console.principal(request)
    job = job_json(await console.node.operator_jobs.get(_app_id(principal), job_id))
    return console.render(request, template, principal, job=job)


@router.post("/console/operator-jobs/{job_id}/cancel")
async def job_cancel(request: Request, job_id: str) -> Response:
    console = console_of(request)
    principal, _ = await console.posted(request)
    await console.node.operator_jobs.cancel(_app_id(principal), job_id)
    return RedirectResponse(f"/console/operator-jobs/{job_id}", status_code=303)
