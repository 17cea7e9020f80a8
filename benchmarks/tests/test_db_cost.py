"""MariaDB's cost per operation from fake readings (no server): per-fire deltas, net of a quiet rate, and
counters the server does not have."""

from __future__ import annotations

from rich.console import Console

from benchmarks import fire
from benchmarks._db_cost import COUNTERS, DbReading, db_cost, per_op_net_of_quiet
from benchmarks.report import BenchResult, Percentiles, Registration, render_table, to_json


def reading(cpu_s: float | None, leave_out: tuple[str, ...] = (), **counters: int) -> DbReading:
    """A reading with every counter at 0 but those given, and none of ``leave_out``."""
    values = {name: counters.get(name, 0) for name in COUNTERS if name not in leave_out}
    return DbReading(cpu_s, values)


QUIET = (
    reading(10.0, Questions=1_000, Handler_write=500, Com_insert=0),
    reading(10.125, Questions=1_021, Handler_write=600, Com_insert=30),
    10.0,
)
WINDOW = (
    QUIET[1],
    reading(12.125, Questions=6_022, Handler_write=4_800, Com_insert=2_030, Innodb_data_fsyncs=400),
    20.0,
)


def test_the_window_gives_the_servers_cost_per_fire_gross_and_net_of_the_quiet_rate() -> None:
    # Given a quiet span of 10 s (0.125 s of CPU, 20 statements, 100 handler writes, 30 inserts) and a
    # window of 20 s with 2,000 fires (2 s of CPU, 5,000 statements, 4,200 handler writes, 2,000 inserts)
    cost = per_op_net_of_quiet(WINDOW, 2_000, QUIET)
    assert cost is not None
    # Then gross is the window's change per fire (each reading's own SHOW taken off the statements)
    assert cost["gross"]["mariadb_cpu_us"] == 1_000.0
    assert cost["gross"]["statements"] == 2.5
    assert cost["gross"]["counters"]["Handler_write"] == 2.1
    assert cost["gross"]["counters"]["Com_insert"] == 1.0
    assert cost["gross"]["counters"]["Innodb_data_fsyncs"] == 0.2
    assert "Questions" not in cost["gross"]["counters"]
    # And the quiet span's rates per second
    assert cost["quiet"] == {
        "seconds": 10.0,
        "mariadb_cores": 0.0125,
        "statements_per_s": 2.0,
        "counters_per_s": {name: 0.0 for name in COUNTERS if name != "Questions"}
        | {"Handler_write": 10.0, "Com_insert": 3.0},
    }
    # And net takes that rate over the window's 20 s off before dividing by the fires
    assert cost["net"]["mariadb_cpu_us"] == 875.0  # (2 - 0.0125 * 20) s / 2,000
    assert cost["net"]["statements"] == 2.48  # (5,000 - 2 * 20) / 2,000
    assert cost["net"]["counters"]["Handler_write"] == 2.0  # (4,200 - 10 * 20) / 2,000
    assert cost["net"]["counters"]["Com_insert"] == 0.97  # (2,000 - 3 * 20) / 2,000
    assert cost["net"]["counters"]["Innodb_data_fsyncs"] == 0.2  # none in the quiet span
    assert (cost["ops"], cost["seconds"], cost["absent"]) == (2_000, 20.0, [])


def test_a_counter_the_server_does_not_have_is_left_out_and_named() -> None:
    # Given a server without Table_open_cache_overflows (in no reading) and a quiet span whose readings
    # lack Created_tmp_tables
    gone = ("Table_open_cache_overflows",)
    quiet = (reading(1.0, gone, Questions=10), reading(1.5, (*gone, "Created_tmp_tables"), Questions=21), 5.0)
    window = (
        reading(1.5, gone, Questions=21, Created_tmp_tables=4),
        reading(2.5, gone, Questions=1_022, Created_tmp_tables=104),
        10.0,
    )
    cost = per_op_net_of_quiet(window, 100, quiet)
    assert cost is not None
    # Then the missing counter breaks nothing: it is named absent and in no figure
    assert cost["absent"] == ["Table_open_cache_overflows"]
    assert "Table_open_cache_overflows" not in cost["gross"]["counters"]
    assert "Table_open_cache_overflows" not in cost["net"]["counters"]
    # And one the quiet span cannot give a rate for has a gross figure and no net one
    assert cost["gross"]["counters"]["Created_tmp_tables"] == 1.0
    assert "Created_tmp_tables" not in cost["net"]["counters"]
    assert (cost["gross"]["statements"], cost["net"]["statements"]) == (10.0, 9.8)  # 1,000 less 2/s × 10 s
    # And db_cost (run_reports) leaves it out too, instead of counting it 0
    assert db_cost(window[0], window[1], 100)["absent"] == ["Table_open_cache_overflows"]
    assert "Table_open_cache_overflows" not in db_cost(window[0], window[1], 100)["totals"]


def test_without_the_servers_cpu_or_statements_the_other_figures_still_come() -> None:
    # Given readings of a server whose /proc cannot be read and which has no Questions counter
    before, after = reading(None, ("Questions",)), reading(None, ("Questions",), Com_update=300)
    cost = per_op_net_of_quiet((before, after, 3.0), 100, (before, before, 2.0))
    assert cost is not None
    assert cost["gross"]["mariadb_cpu_us"] is None and cost["gross"]["statements"] is None
    assert cost["net"]["mariadb_cpu_us"] is None and cost["net"]["statements"] is None
    assert cost["quiet"]["mariadb_cores"] is None and cost["quiet"]["statements_per_s"] is None
    assert cost["gross"]["counters"]["Com_update"] == cost["net"]["counters"]["Com_update"] == 3.0
    assert cost["absent"] == ["Questions"]
    # And no fire, no figure
    assert per_op_net_of_quiet((before, after, 3.0), 0, None) is None


def test_the_fire_bench_gives_no_net_figure_without_a_quiet_second_and_warns_of_absent_counters() -> None:
    warnings: list[str] = []
    gone = ("Table_open_cache_misses",)
    quiet, start = (100.0, reading(1.0, gone, Questions=5)), (100.4, reading(1.1, gone, Questions=10))
    end = (110.4, reading(3.1, gone, Questions=2_011))
    cost = fire._mariadb_per_fire(quiet, start, end, 1_000, warnings)
    assert cost is not None
    assert (cost["gross"]["mariadb_cpu_us"], cost["gross"]["statements"]) == (2_000.0, 2.0)
    assert cost["quiet"] is None and cost["net"] is None
    assert len(warnings) == 2
    assert warnings[0].startswith("only 0.4 s between the registration and the window")
    assert warnings[1] == "MariaDB has no status counter Table_open_cache_misses: not reported"
    # With a second of quiet, the net figure comes
    warnings.clear()
    later = (quiet[0] - 1.0, quiet[1])
    cost = fire._mariadb_per_fire(later, start, end, 1_000, warnings)
    assert cost is not None and cost["net"] is not None and cost["quiet"]["seconds"] == 1.4
    # Without a probe, nothing
    assert fire._mariadb_per_fire(None, None, None, 1_000, warnings) is None


def test_the_result_shows_the_cost_per_fire_in_json_and_in_the_table() -> None:
    registration = Registration(2_000, 2_000, 0, 1.0, Percentiles.of([1.0]))
    result = BenchResult(mode="fire", base_url="http://node", tasks=2_000, registration=registration, window_s=20.0)
    assert to_json(result)["mariadb_per_fire"] is None and to_json(result)["statements_per_fire"] is None
    result.mariadb = per_op_net_of_quiet(WINDOW, 2_000, QUIET)
    summary = to_json(result)
    assert (summary["mariadb_cpu_us_per_fire"], summary["mariadb_cpu_us_per_fire_net"]) == (1_000.0, 875.0)
    assert (summary["statements_per_fire"], summary["statements_per_fire_net"]) == (2.5, 2.48)
    assert summary["mariadb_per_fire"]["net"]["counters"]["Handler_write"] == 2.0
    console = Console(record=True, width=200)
    console.print(render_table(summary))
    text = console.export_text()
    assert "MariaDB CPU per fire, gross / net of quiet" in text and "1,000 / 875" in text
    assert "Handler_write per fire, gross / net" in text and "2.1 / 2" in text


def test_the_counters_include_index_work_and_table_cache_churn() -> None:
    asked = {
        "Handler_write", "Handler_update", "Handler_delete", "Handler_read_key", "Innodb_rows_inserted",
        "Innodb_rows_updated", "Innodb_rows_deleted", "Opened_tables", "Table_open_cache_misses",
        "Table_open_cache_overflows", "Innodb_buffer_pool_reads", "Innodb_buffer_pool_pages_flushed",
        "Innodb_data_fsyncs", "Created_tmp_tables",
    }  # fmt: skip
    assert asked <= set(COUNTERS) and len(set(COUNTERS)) == len(COUNTERS)
