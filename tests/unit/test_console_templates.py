"""Console templates rendered alone (no node, no browser): what a page shows for records the browser
tests cannot easily make, and that every value is escaped."""

from __future__ import annotations

from typing import Any

from tjobs.api.render import flow_json
from tjobs.console.context import Principal, _templates
from tjobs.model import App, Flow, FlowKind, FlowStatus

APP = App(id="app_1", name="<b>shop</b>", api_key_hash="x", secrets=["s"])


def render(template: str, **context: Any) -> str:
    principal = Principal(APP, "token")
    html: str = (
        _templates()
        .get_template(template)
        .render(principal=principal, csrf=principal.csrf, path="/console/flows/x", node_id="n1", **context)
    )
    return html


def pool_flow(**changes: Any) -> Flow:
    flow = Flow(7, 1_800_000_000_000, "app_1", FlowKind.SCHEDULED, FlowStatus.DELIVERED, 2, None, 0, 0)
    for name, value in changes.items():
        setattr(flow, name, value)
    return flow


def test_a_pool_flow_page_lists_which_executor_got_which_attempt() -> None:
    flow = pool_flow(routes=((1, "10.0.0.5:9000", "exec-a"), (2, "10.0.0.6:9000", "exec-b")))

    html = render("flow.html", owner=APP, flow=flow_json(flow), task=None)

    assert "Attempts sent to executors" in html
    assert html.index("exec-a") < html.index("exec-b")


def test_a_flow_without_executors_has_no_such_table() -> None:
    assert "Attempts sent to executors" not in render("flow.html", owner=APP, flow=flow_json(pool_flow()), task=None)


def test_values_are_escaped() -> None:
    flow = pool_flow(status=FlowStatus.DEAD, last_error="<script>alert(1)</script>")

    html = render("flow.html", owner=APP, flow=flow_json(flow), task=None)

    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert "<b>shop</b>" not in html
