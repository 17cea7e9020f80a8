"""A task's ``children``: the request shape, each refusal naming its entry, and the walk refusing cycles."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.contract.backends import make_task
from tjobs.delivery.child_triggers import result_of, with_children
from tjobs.errors import InvalidInput
from tjobs.model import AttemptAnswer, ChildTrigger, FlowRun, FlowStatus, FlowUpdate, RunStatus, TaskChildren
from tjobs.service.child_tasks import MAX_CHILDREN, MAX_WALK, ChildrenReader, check_no_cycle, parse_children


def _reader(graph: dict[int, TaskChildren]) -> ChildrenReader:
    async def read(task_id: int) -> TaskChildren | None:
        return graph.get(task_id)

    return read


def test_children_are_parsed_in_order_from_id_strings() -> None:
    children = parse_children({"on_success": ["7", "5"], "on_failure": ["9"]})
    assert children == TaskChildren((7, 5), (9,))
    assert children.all == (7, 5, 9)


@pytest.mark.parametrize("value", [None, {}, {"on_success": []}, {"on_success": None, "on_failure": []}])
def test_no_children_is_none(value: object) -> None:
    assert parse_children(value) is None


@pytest.mark.parametrize(
    ("value", "field", "code"),
    [
        (["1"], "children", "invalid_input"),
        ({"on_done": ["1"]}, "children.on_done", "unknown_field"),
        ({"on_success": "1"}, "children.on_success", "invalid_input"),
        ({"on_success": ["1", "x"]}, "children.on_success[1]", "invalid_input"),
        ({"on_failure": [True]}, "children.on_failure[0]", "invalid_input"),
        ({"on_success": ["3", "3"]}, "children.on_success[1]", "duplicate_child"),
        ({"on_success": [str(i) for i in range(1, MAX_CHILDREN + 2)]}, "children.on_success", "too_many_children"),
    ],
)
def test_bad_children_are_refused_naming_the_entry(value: object, field: str, code: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_children(value)
    assert (refused.value.field, refused.value.code) == (field, code)


async def test_a_task_naming_itself_is_refused() -> None:
    with pytest.raises(InvalidInput) as refused:
        await check_no_cycle(4, TaskChildren((2,), (4,)), _reader({}))
    assert (refused.value.field, refused.value.code) == ("children.on_failure[0]", "self_child")


async def test_a_cycle_through_stored_children_is_refused_with_its_path() -> None:
    graph = {2: TaskChildren((3,)), 3: TaskChildren((), (1,))}
    with pytest.raises(InvalidInput) as refused:
        await check_no_cycle(1, TaskChildren((5, 2)), _reader(graph))
    assert (refused.value.field, refused.value.code) == ("children.on_success[1]", "cycle")
    assert "1 -> 2 -> 3 -> 1" in str(refused.value)


async def test_a_diamond_is_no_cycle() -> None:
    graph = {2: TaskChildren((4,)), 3: TaskChildren((4,)), 4: TaskChildren((5,))}
    await check_no_cycle(1, TaskChildren((2, 3)), _reader(graph))


async def test_a_graph_past_the_walk_bound_is_refused() -> None:
    graph = {i: TaskChildren((i + 1,)) for i in range(10, 10 + MAX_WALK + 5)}
    with pytest.raises(InvalidInput) as refused:
        await check_no_cycle(1, TaskChildren((10,)), _reader(graph))
    assert refused.value.code == "too_deep"


def _ending(status: FlowStatus, **fields: object) -> FlowUpdate:
    return replace(FlowUpdate(1, 1_000, status, 1, None), **fields)  # type: ignore[arg-type]


def _answer(body: str) -> AttemptAnswer:
    return AttemptAnswer(1, "http://x", 200, (), body, len(body), 1)


def test_a_delivered_flow_triggers_the_success_children_a_dead_one_the_failure_children() -> None:
    task = replace(make_task(), children=TaskChildren((2, 3), (4,)))
    run = FlowRun(RunStatus.SUCCEEDED, 1, 0, result={"rows": 3})

    delivered = with_children(task, _ending(FlowStatus.DELIVERED, run=run), 5_000)
    dead = with_children(task, _ending(FlowStatus.DEAD, answers=(_answer("oops"),)), 5_000)
    cancelled = with_children(task, _ending(FlowStatus.CANCELLED), 5_000)

    assert delivered.children == ChildTrigger(task.app_id, (2, 3), '{"rows":3}')
    assert dead.children == ChildTrigger(task.app_id, (4,), '"oops"')
    assert cancelled.children is None
    assert delivered.next_attempt_at_ms == dead.next_attempt_at_ms == 5_000  # the marker: children due
    assert cancelled.next_attempt_at_ms is None
    assert with_children(replace(task, children=None), _ending(FlowStatus.DELIVERED), 5_000).children is None


@pytest.mark.parametrize(
    ("answers", "result"),
    [((), None), ((_answer('{"a": 1}'),), {"a": 1}), ((_answer("plain"),), "plain"), ((_answer(""),), None)],
)
def test_a_delivery_only_parents_result_is_its_newest_answers_body(
    answers: tuple[AttemptAnswer, ...], result: object
) -> None:
    assert result_of(_ending(FlowStatus.DELIVERED, answers=answers)) == result
