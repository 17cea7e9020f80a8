"""``/v1/targets``: an app's named delivery targets — create, list, get, update, delete.

Each app sees only its own targets (another app's name answers 404). Answers never carry a
credential's value (``credentials`` shows the keys, each ``***``); see :mod:`tjobs.service.targets`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from tjobs import wire
from tjobs.api.deps import AppDep, NodeDep, TargetNamePath, body_doc, errors, json_body, json_response, ok
from tjobs.clock import iso_ms
from tjobs.errors import NotFound
from tjobs.targets.codec import target_json
from tjobs.targets.model import Target

router = APIRouter(prefix="/v1", tags=["targets"])

_NAME = re.compile(wire.TARGET_NAME_PATTERN)


def _json(target: Target) -> dict[str, Any]:
    return target_json(target, iso_ms)


def _name(raw: str) -> str:
    """A target name from a path; anything that cannot be one is a 404 (as a name not stored)."""
    if not _NAME.fullmatch(raw):
        raise NotFound("target", raw[:80])
    return raw


@router.post(
    "/targets",
    status_code=201,
    summary="Create a named target (HTTP, gRPC, AMQP, NATS JetStream or Redis Streams)",
    responses={**ok(201, wire.StoredTarget, "created"), **errors(401, 409, 422)},
    openapi_extra=body_doc(wire.TargetCreate),
)
async def create_target(request: Request, app: AppDep, node: NodeDep) -> Any:
    target = await node.target_service.create(app, await json_body(request))
    return json_response(_json(target), 201)


@router.get(
    "/targets",
    summary="List the app's targets by name",
    responses={**ok(200, wire.StoredTargetPage), **errors(401, 422)},
)
async def list_targets(
    app: AppDep,
    node: NodeDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> Any:
    items, next_cursor = await node.target_service.list_targets(app, limit, cursor)
    return json_response({"items": [_json(t) for t in items], "next_cursor": next_cursor})


@router.get(
    "/targets/{name}",
    summary="Get a target (credentials as keys only)",
    responses={**ok(200, wire.StoredTarget), **errors(401, 404)},
)
async def get_target(name: TargetNamePath, app: AppDep, node: NodeDep) -> Any:
    return json_response(_json(await node.target_service.get(app, _name(name))))


@router.patch(
    "/targets/{name}",
    summary="Update a target (pass version to get 409 on a lost race); the next attempt uses it",
    responses={**ok(200, wire.StoredTarget), **errors(401, 404, 409, 422)},
    openapi_extra=body_doc(wire.TargetUpdate),
)
async def update_target(name: TargetNamePath, request: Request, app: AppDep, node: NodeDep) -> Any:
    target_name = _name(name)
    return json_response(_json(await node.target_service.update(app, target_name, await json_body(request))))


@router.delete(
    "/targets/{name}",
    status_code=204,
    summary="Delete a target (409 target_in_use, with how many, while tasks name it)",
    responses={**ok(204, None, "deleted"), **errors(401, 404, 409)},
)
async def delete_target(name: TargetNamePath, app: AppDep, node: NodeDep) -> Response:
    await node.target_service.delete(app, _name(name))
    return Response(status_code=204)
