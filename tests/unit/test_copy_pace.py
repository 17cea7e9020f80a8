"""How hard a shard move's copy may work the servers (tjobs/stores/copy_pace.py): after each batch it
rests long enough that it is busy at most ``duty`` of the time and copies at most ``max_rows_per_s``;
a bad value is refused with the option's name."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tjobs.cli.main import app
from tjobs.stores.copy_pace import UNPACED, CopyPace


def test_at_half_duty_a_batch_is_followed_by_a_rest_as_long_as_it_took() -> None:
    assert CopyPace(duty=0.5).rest_s(rows=1000, busy_s=0.2) == pytest.approx(0.2)


def test_at_a_quarter_duty_the_rest_is_three_times_the_batch() -> None:
    assert CopyPace(duty=0.25).rest_s(rows=1000, busy_s=0.2) == pytest.approx(0.6)


def test_a_slower_batch_earns_a_longer_rest() -> None:
    """A source whose statements slow down (busy, contended) gets proportionally more time to itself."""
    pace = CopyPace(duty=0.5)
    assert pace.rest_s(rows=1000, busy_s=0.8) == pytest.approx(4 * pace.rest_s(rows=1000, busy_s=0.2))


def test_the_rows_per_second_cap_rests_until_the_batch_is_paid_for() -> None:
    pace = CopyPace(duty=1.0, max_rows_per_s=2000)
    assert pace.rest_s(rows=1000, busy_s=0.1) == pytest.approx(0.4)  # 1000 rows take 0.5 s in all
    assert pace.rest_s(rows=1000, busy_s=0.7) == 0.0  # slower than the cap already


def test_the_longer_of_the_two_rests_wins() -> None:
    pace = CopyPace(duty=0.5, max_rows_per_s=2000)
    assert pace.rest_s(rows=1000, busy_s=0.1) == pytest.approx(0.4)  # the cap
    assert pace.rest_s(rows=1000, busy_s=0.4) == pytest.approx(0.4)  # the duty


def test_copying_rows_per_second_at_a_duty_is_the_unpaced_speed_times_the_duty() -> None:
    pace = CopyPace(duty=0.25)
    busy_s = 0.05  # 1000 rows in 50 ms unpaced: 20,000 rows/s
    assert 1000 / (busy_s + pace.rest_s(1000, busy_s)) == pytest.approx(5000)


def test_unpaced_never_rests() -> None:
    assert UNPACED.rest_s(rows=10_000, busy_s=3.0) == 0.0
    assert UNPACED.unpaced and not CopyPace(duty=0.5).unpaced and not CopyPace(1.0, 100).unpaced


@pytest.mark.parametrize("duty", [0.0, -0.5, 1.5, float("nan")])
def test_a_duty_outside_zero_to_one_is_refused_naming_the_option(duty: float) -> None:
    with pytest.raises(ValueError, match=r"--copy-duty must be above 0 and at most 1"):
        CopyPace(duty=duty)


@pytest.mark.parametrize("cap", [0, -10])
def test_a_rows_per_second_cap_below_one_is_refused_naming_the_option(cap: int) -> None:
    with pytest.raises(ValueError, match=r"--max-rows-per-s must be at least 1"):
        CopyPace(max_rows_per_s=cap)


@pytest.mark.parametrize(
    ("command", "options", "named"),
    [
        (["move", "--db", "1", "--to", "db-b:3306"], ["--copy-duty", "0"], "--copy-duty must be above 0"),
        (["move", "--db", "1", "--to", "db-b:3306"], ["--copy-duty", "1.5"], "--copy-duty must be above 0"),
        (["move", "--db", "1", "--to", "db-b:3306"], ["--max-rows-per-s", "0"], "--max-rows-per-s must be at least 1"),
        (["rebalance", "--servers", "db-a:3306,db-b:3306", "--apply"], ["--copy-duty", "-1"], "--copy-duty must be"),
    ],
)
def test_the_cli_refuses_a_bad_pace_before_it_reads_settings_or_touches_a_server(
    command: list[str], options: list[str], named: str
) -> None:
    # no --config: were settings read, the defaults would name a server on localhost and the run try it
    answer = CliRunner().invoke(app, ["shards", *command, *options])

    assert answer.exit_code == 2 and named in answer.output, answer.output
