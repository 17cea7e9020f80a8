"""One flow's page: when it was scheduled, its status, and every attempt the store keeps."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from tjobs.api.render import flow_json, task_json
from tjobs.console.context import ConsoleRoute, console_of
from tjobs.errors import NotFound

router = APIRouter(route_class=ConsoleRoute)


@router.get("/console/flows/{flow_id}")
async def flow_page(request: Request, flow_id: str) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    owner = await console.flow_owner(principal, flow_id)
    flow = await console.node.tasks.get_flow(owner, flow_id)
    try:
        task = task_json(await console.node.tasks.get(owner, flow.task_id))
    except NotFound:  # deleted: its flows stay as history
        task = None
    return console.render(request, "flow.html", principal, owner=owner, flow=flow_json(flow), task=task)
