"""The flow filters as query parameters (``GET /v1/flows``, ``/v1/flows:count``, ``/v1/flows:export``,
``/v1/dead-letters``, ``/v1/dead-letters:count``): published with their forms, read into
:class:`tjobs.service.flow_filters.FlowFilters` by the service's one parser (each bad value a 422 naming
its parameter)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

from fastapi import Depends, Query, Request

from tjobs.api.deps import node_of
from tjobs.api.schemas import INSTANT_FILTER, LAST_ANSWER_PATTERN, FlowFilterName
from tjobs.api.schemas import TASK_ID_FILTER_PATTERN as TASK_ID_PATTERN
from tjobs.service.flow_filters import FlowFilters, parse_flow_filters, refuse_blank
from tjobs.wire import KEY_PATTERN, TARGET_NAME_PATTERN


async def dead_letter_filters(
    request: Request,
    task_id: Annotated[
        str | None, Query(max_length=19, json_schema_extra={"pattern": TASK_ID_PATTERN}, description="one task's flows")
    ] = None,
    task_name_prefix: Annotated[
        str | None,
        Query(min_length=1, max_length=200, pattern=KEY_PATTERN, description="flows of tasks whose name starts so"),
    ] = None,
    target: Annotated[
        str | None, Query(pattern=TARGET_NAME_PATTERN, description="flows of tasks whose callback names this target")
    ] = None,
    last_answer: Annotated[
        str | None,
        Query(
            pattern=LAST_ANSWER_PATTERN, description="the last answer: none (no answer), a class (5xx), a code (503)"
        ),
    ] = None,
    window: Annotated[
        Literal["15m", "1h", "24h", "7d"] | None,
        Query(description="scheduled in the last 15m, 1h, 24h or 7d (not with from/to)"),
    ] = None,
    from_: Annotated[
        str | None,
        Query(
            alias="from",
            max_length=40,
            json_schema_extra=INSTANT_FILTER,
            description="scheduled at or after (ISO-8601 or ms)",
        ),
    ] = None,
    to: Annotated[
        str | None,
        Query(max_length=40, json_schema_extra=INSTANT_FILTER, description="scheduled before (ISO-8601 or ms)"),
    ] = None,
) -> FlowFilters:
    values = {
        "task_id": task_id,
        "task_name_prefix": task_name_prefix,
        "target": target,
        "last_answer": last_answer,
        "window": window,
        "from": from_,
        "to": to,
    }
    refuse_blank(values)
    return parse_flow_filters(values, node_of(request).clock.now_ms())


DeadLetterFiltersDep = Annotated[FlowFilters, Depends(dead_letter_filters)]


async def flow_filters(
    filters: DeadLetterFiltersDep,
    status: Annotated[FlowFilterName | None, Query(description="a flow status, or retrying")] = None,
) -> FlowFilters:
    return replace(filters, status=status)


FlowFiltersDep = Annotated[FlowFilters, Depends(flow_filters)]
