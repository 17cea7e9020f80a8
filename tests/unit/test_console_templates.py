"""Console templates rendered alone (no node, no browser): what a page shows for records the browser
tests cannot easily make, and that every value is escaped."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tjobs.api.render import answers_json, flow_json, task_json
from tjobs.console.context import Principal, _templates
from tjobs.console.pages_targets import target_view
from tjobs.console.pages_tasks import HistoryPage
from tjobs.model import App, AttemptAnswer, DeliveryMode, Flow, FlowKind, FlowStatus, MisfirePolicy, Task, TaskStatus
from tjobs.settings import CallbackSettings
from tjobs.specs.callback import CallbackSpec
from tjobs.specs.schedule import AtSpec
from tjobs.targets.model import AmqpTarget, HttpTarget, NatsTarget, RetryPolicy, Target

APP = App(id="app_1", name="<b>shop</b>", api_key_hash="x", secrets=["s"])
SECRET = "hunter2-never-shown-7f3a"  # a credential value no page may contain


def render(template: str, admin: bool = False, **context: Any) -> str:
    principal = Principal(None if admin else APP, "token")
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

    html = render_flow(flow)

    assert "Attempts sent to executors" in html
    assert html.index("exec-a") < html.index("exec-b")


def test_a_flow_without_executors_has_no_such_table() -> None:
    assert "Attempts sent to executors" not in render_flow(pool_flow())


def test_values_are_escaped() -> None:
    answer = AttemptAnswer(
        1, "https://shop.example/x", 500, (("X-Evil", "<script>alert(2)</script>"),), "<b>shop</b>", 11, 1
    )
    flow = pool_flow(status=FlowStatus.DEAD, last_error="<script>alert(1)</script>", answers=(answer,))

    html = render_flow(flow)

    assert "<script>alert" not in html and "&lt;script&gt;alert(1)" in html and "&lt;script&gt;alert(2)" in html
    assert "<b>shop</b>" not in html


def render_flow(flow: Flow) -> str:
    """A flow's page of a deleted task (no request to show) with the flow's own answers."""
    return render(
        "flow.html",
        owner=APP,
        flow=flow_json(flow),
        task=None,
        sent=None,
        answers=answers_json(flow),
        answer_body_bytes=4096,
        parent_flows=[],
        child_flows=[],
    )


def amqp_target(**changes: Any) -> Target:
    settings = AmqpTarget(url="amqp://10.0.0.5:5672/", exchange="orders", routing_key="order.close")
    target = Target(
        app_id="app_1",
        name="orders-mq",
        settings=settings,
        version=3,
        retry=RetryPolicy(max_attempts=5),
        credentials={"username": SECRET + "-user", "password": SECRET},
        created_at_ms=1_800_000_000_000,
        updated_at_ms=1_800_000_000_000,
    )
    return replace(target, **changes)


def render_target(target: Target, template: str = "target.html", **context: Any) -> str:
    return render(template, owner=APP, target=target_view(target, CallbackSettings()), naming=2, **context)


def test_a_target_page_says_which_credentials_are_set_never_their_values() -> None:
    html = render_target(amqp_target())

    assert SECRET not in html
    assert "<dt>password</dt><dd>set</dd>" in html and "<dt>username</dt><dd>set</dd>" in html
    assert "exchange orders, routing key order.close" in html


def test_a_nats_target_lists_its_token_as_not_set() -> None:
    settings = NatsTarget(servers=("nats://10.0.0.8:4222",), subject="orders.close")
    target = amqp_target(settings=settings, credentials={"password": SECRET, "username": "u"})

    html = render_target(target)

    assert SECRET not in html
    assert "<dt>token</dt><dd>not set</dd>" in html and "<dt>password</dt><dd>set</dd>" in html
    assert "subject orders.close" in html


def test_an_http_targets_credential_headers_are_named_and_never_shown() -> None:
    settings = HttpTarget(urls=("https://a.example/hook", "https://b.example/hook"), method="PUT")
    target = Target("app_1", "billing-hook", settings, credentials={"authorization": f"Bearer {SECRET}"})

    page = render_target(target)
    listing = render(
        "targets.html",
        scoped=APP,
        choices=[],
        targets=[target_view(target, CallbackSettings())],
        next_cursor=None,
        notice=None,
    )

    for html in (page, listing):
        assert SECRET not in html
        assert "PUT https://a.example/hook, https://b.example/hook" in html
    assert "<dt>authorization</dt><dd>set</dd>" in page


def test_a_targets_retry_policy_shows_its_own_values_and_the_node_defaults() -> None:
    html = render_target(amqp_target())

    assert "<dt>max_attempts</dt><dd>5</dd>" in html
    assert f'<dt>max_age_s</dt><dd>{CallbackSettings().max_age_s} <span class="muted">(node default)' in html


def test_target_values_are_escaped() -> None:
    settings = AmqpTarget(url="amqp://10.0.0.5:5672/", exchange="<script>alert(1)</script>", routing_key="<b>k</b>")
    target = amqp_target(settings=settings)

    for html in (
        render_target(target),
        render(
            "targets.html",
            scoped=APP,
            choices=[],
            targets=[target_view(target, CallbackSettings())],
            next_cursor=None,
            notice=None,
        ),
    ):
        assert "<script>alert" not in html and "&lt;script&gt;" in html
        assert "<b>k</b>" not in html
        assert "<b>shop</b>" not in html


def test_the_admins_target_links_name_the_app() -> None:
    target = amqp_target()

    listing = render(
        "targets.html",
        admin=True,
        scoped=APP,
        choices=[],
        targets=[target_view(target, CallbackSettings())],
        next_cursor=None,
        notice=None,
    )
    confirm = render_target(target, "target_confirm.html", admin=True, error=None)

    assert 'href="/console/targets/orders-mq?app=app_1"' in listing
    assert '<input type="hidden" name="app" value="app_1">' in confirm


def task_naming(*targets: str) -> Task:
    callback = CallbackSpec(urls=(), targets=targets)
    return Task(
        7,
        "app_1",
        "close-order",
        None,
        AtSpec(1_800_000_000_000),
        callback,
        None,
        MisfirePolicy.FIRE_NOW,
        DeliveryMode.AT_LEAST_ONCE,
        TaskStatus.ACTIVE,
        1_800_000_000_000,
        1,
        0,
        0,
        0,
    )


def render_task(task: Task, admin: bool = False) -> str:
    return render(
        "task.html",
        admin=admin,
        owner=APP,
        task=task,
        shown=task_json(task),
        instants=[],
        preview_query="",
        history=HistoryPage([], None, None, True),
        notice=None,
        parents=None,
    )


def test_a_task_naming_a_target_links_to_its_page() -> None:
    html = render_task(task_naming("orders-mq"))

    assert 'target: <a href="/console/targets/orders-mq">orders-mq</a>' in html


def test_a_task_naming_several_targets_links_each_and_the_admin_link_names_the_app() -> None:
    html = render_task(task_naming("orders-mq", "orders.audit"), admin=True)

    assert 'targets: <a href="/console/targets/orders-mq?app=app_1">orders-mq</a>, ' in html
    assert '<a href="/console/targets/orders.audit?app=app_1">orders.audit</a>' in html


def test_a_task_with_an_inline_url_names_no_target() -> None:
    task = task_naming()
    task.callback = CallbackSpec(urls=("https://example.com/",))

    assert "/console/targets/" not in render_task(task)
