"""The alerts page: what fires now, the rules and the channels (:mod:`tjobs.alerts`).

An app session sees its app's; the admin sees the global ones and every app's. Read-only: rules and
channels are managed through ``/v1/alerts`` and ``tjobs alerts``. Channel secrets never reach the page
(the API's view, ``"***"``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from tjobs.alerts.views import alert_json, channel_json, rule_json
from tjobs.console.context import ConsoleRoute, console_of

router = APIRouter(route_class=ConsoleRoute)


@router.get("/console/alerts")
async def alerts_page(request: Request) -> Response:
    console = console_of(request)
    principal = await console.principal(request)
    caller = None if principal.app is None else principal.app.id
    service = console.node.alerts.service
    rules = [rule_json(rule) for rule in await service.list_rules(caller)]
    channels = [channel_json(channel) for channel in await service.list_channels(caller)]
    firing = [alert_json(state, rule) for state, rule in await service.active(caller)]
    names = {channel["id"]: channel["name"] for channel in channels}
    for rule in rules:
        rule["channel_names"] = [names.get(channel_id, channel_id) for channel_id in rule["channels"]]
        rule["params_text"] = ", ".join(f"{name} {value}" for name, value in rule["params"].items()) or "-"
    for channel in channels:
        settings = channel["settings"]
        channel["where"] = settings.get("url") or ", ".join(settings.get("to", []))
    return console.render(request, "alerts.html", principal, rules=rules, channels=channels, firing=firing)
