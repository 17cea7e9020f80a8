"""``/v1/alerts``: alert rules and channels, and what fires (:mod:`tjobs.alerts`).

An app's key manages its app's rules and channels and sees its alerts; the admin key manages the global
ones (cluster rules: nodes, database servers, shard moves) and sees, edits and deletes every app's.
Another app's rule or channel answers 404. A channel's secret is shown once, in the answer to the create
that made it; afterwards ``"***"``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import Field

from tjobs import wire
from tjobs.alerts.channels import CHANNEL_KINDS
from tjobs.alerts.rules import RULE_KINDS
from tjobs.alerts.views import alert_json, channel_json, rule_json
from tjobs.api.deps import AppOrAdminDep, NodeDep, body_doc, errors, json_body, json_response, ok, path_parameter
from tjobs.model import App

router = APIRouter(prefix="/v1/alerts", tags=["alerts"])

RuleIdPath = Annotated[str, path_parameter(r"^rule_[0-9a-f]{16}$", 21, "an alert rule's id")]
ChannelIdPath = Annotated[str, path_parameter(r"^chan_[0-9a-f]{16}$", 21, "an alert channel's id")]


NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class AlertRuleBody(wire.RequestShape):
    """An alert rule (PATCH: any of the fields; ``kind`` cannot change)."""

    name: str = Field(pattern=NAME, max_length=64)
    kind: Literal[RULE_KINDS]  # type: ignore[valid-type]
    params: dict[str, Any] = Field(default_factory=dict, description="per kind: docs/operations.md, Built-in alerts")
    channels: list[Annotated[str, Field(pattern=r"^chan_[0-9a-f]{16}$")]] = Field(
        default_factory=list, max_length=10, description="channel ids of the same owner"
    )
    repeat_s: int = Field(default=3600, ge=0, le=604_800, description="repeat while firing; 0: never")
    enabled: bool = True


class AlertChannelBody(wire.RequestShape):
    """An alert channel (PATCH: any of the fields; ``kind`` cannot change)."""

    name: str = Field(pattern=NAME, max_length=64)
    kind: Literal[CHANNEL_KINDS]  # type: ignore[valid-type]
    settings: dict[str, Any] = Field(description="url (and secret) for the URL kinds; to for email")


def _caller(caller: App | None) -> str | None:
    return None if caller is None else caller.id


# ---- rules -----------------------------------------------------------------------------------------


@router.get("/rules", summary="List alert rules (an app's own; the admin: every rule)", responses=errors(401))
async def list_rules(caller: AppOrAdminDep, node: NodeDep) -> Any:
    return json_response({"items": [rule_json(r) for r in await node.alerts.service.list_rules(_caller(caller))]})


@router.post(
    "/rules",
    status_code=201,
    summary="Create an alert rule",
    responses={**ok(201, None, "created"), **errors(401, 422)},
    openapi_extra=body_doc(AlertRuleBody),
)
async def create_rule(request: Request, caller: AppOrAdminDep, node: NodeDep) -> Any:
    rule = await node.alerts.service.create_rule(_caller(caller), await json_body(request))
    return json_response(rule_json(rule), 201)


@router.get("/rules/{rule_id}", summary="Get an alert rule", responses=errors(401, 404))
async def get_rule(rule_id: RuleIdPath, caller: AppOrAdminDep, node: NodeDep) -> Any:
    return json_response(rule_json(await node.alerts.service.get_rule(_caller(caller), rule_id)))


@router.patch(
    "/rules/{rule_id}",
    summary="Change an alert rule",
    responses=errors(401, 404, 422),
    openapi_extra=body_doc(AlertRuleBody),
)
async def update_rule(rule_id: RuleIdPath, request: Request, caller: AppOrAdminDep, node: NodeDep) -> Any:
    rule = await node.alerts.service.update_rule(_caller(caller), rule_id, await json_body(request))
    return json_response(rule_json(rule))


@router.delete("/rules/{rule_id}", status_code=204, summary="Delete an alert rule", responses=errors(401, 404))
async def delete_rule(rule_id: RuleIdPath, caller: AppOrAdminDep, node: NodeDep) -> Response:
    await node.alerts.service.delete_rule(_caller(caller), rule_id)
    return Response(status_code=204)


# ---- channels --------------------------------------------------------------------------------------


@router.get("/channels", summary="List alert channels (secrets hidden)", responses=errors(401))
async def list_channels(caller: AppOrAdminDep, node: NodeDep) -> Any:
    channels = await node.alerts.service.list_channels(_caller(caller))
    return json_response({"items": [channel_json(c) for c in channels]})


@router.post(
    "/channels",
    status_code=201,
    summary="Create an alert channel (a webhook's generated secret is in this answer only)",
    responses={**ok(201, None, "created"), **errors(401, 422)},
    openapi_extra=body_doc(AlertChannelBody),
)
async def create_channel(request: Request, caller: AppOrAdminDep, node: NodeDep) -> Any:
    channel = await node.alerts.service.create_channel(_caller(caller), await json_body(request))
    return json_response(channel_json(channel, reveal_secret=True), 201)


@router.get("/channels/{channel_id}", summary="Get an alert channel", responses=errors(401, 404))
async def get_channel(channel_id: ChannelIdPath, caller: AppOrAdminDep, node: NodeDep) -> Any:
    return json_response(channel_json(await node.alerts.service.get_channel(_caller(caller), channel_id)))


@router.patch(
    "/channels/{channel_id}",
    summary="Change an alert channel",
    responses=errors(401, 404, 422),
    openapi_extra=body_doc(AlertChannelBody),
)
async def update_channel(channel_id: ChannelIdPath, request: Request, caller: AppOrAdminDep, node: NodeDep) -> Any:
    channel = await node.alerts.service.update_channel(_caller(caller), channel_id, await json_body(request))
    return json_response(channel_json(channel))


@router.delete(
    "/channels/{channel_id}",
    status_code=204,
    summary="Delete an alert channel (409 while a rule names it)",
    responses=errors(401, 404, 409),
)
async def delete_channel(channel_id: ChannelIdPath, caller: AppOrAdminDep, node: NodeDep) -> Response:
    await node.alerts.service.delete_channel(_caller(caller), channel_id)
    return Response(status_code=204)


# ---- what fires ------------------------------------------------------------------------------------


@router.get("/active", summary="What fires now (with resolved=true: what resolved, too)", responses=errors(401))
async def active(
    caller: AppOrAdminDep,
    node: NodeDep,
    resolved: Annotated[bool, Query(description="include resolved alerts")] = False,
) -> Any:
    found = await node.alerts.service.active(_caller(caller), include_resolved=resolved)
    return json_response({"items": [alert_json(state, rule) for state, rule in found]})
