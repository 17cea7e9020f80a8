"""``python -m tests.chaos.soak`` (``make soak``): the nemesis soak. See docs/testing.md, "The nemesis soak".

Exit code: 0 passed, 1 failed (a loss, duplicate flow, phantom, reused attempt, early first send, or a
resource that grew beyond its tolerance), 2 could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Coroutine, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testkit.children import REPO
from testkit.cluster_rig import CLUSTER_SH, Api, Infra, now_ms, start_infra
from testkit.databases import drop_databases
from testkit.tcp_proxy import ProxyProcess
from tests.chaos.accounting import percentile
from tests.chaos.scenario import outcome_flush, product_defaults
from tests.chaos.soak.cluster import CUT_SERVER, NODES, SoakCluster, port_of
from tests.chaos.soak.nemesis import Nemesis
from tests.chaos.soak.report import Sample, Tally, failures, sample_dicts, text_report, trends
from tests.chaos.soak.rounds import EVERY_MS, Round, RoundPlan, registration_lead_ms
from tests.chaos.soak.sampler import cpu_s, remote_ports_by_inode, sample_node
from tests.chaos.soak.schedule import KINDS, fault_schedule
from tjobs.settings import StorageSettings

log = logging.getLogger("soak")
GROUPED_FLUSH = {"callbacks": {"outcome_flush_ms": 500, "outcome_flush_batch": 2500}}  # docs/configuration.md


@dataclass(frozen=True)
class SoakSettings:
    minutes: float = 120.0
    rate_per_s: float = 1000.0
    one_shot_share: float = 0.2  # of the rate; the rest are interval tasks firing every second
    round_s: float = 300.0
    fault_period_s: float = 60.0
    sample_every_s: float = 10.0
    settle_s: float = 40.0
    watch_s: float = 30.0
    outcome_flush: str = "default"  # or "grouped": 500 ms / 2,500
    faults: tuple[str, ...] = KINDS  # cycled in this order
    # each round's app: callbacks in flight at once per node, what its one receiver (in this process, on
    # the nodes' 2 cores) is declared to take: the product's default app setting (docs/testing.md)
    max_concurrency: int = 100
    product_defaults: bool = False  # else the fault suite's fast settings (10-s cycles, 3-s grace)
    out_dir: Path = Path(".services/soak")
    state_dir: Path = Path(".services/soak-rig")
    mysql_ports: str = "18000 18001"
    etcd_port: int = 18002  # and its peer port + 1
    redis_port: int = 18004

    def overrides(self) -> dict[str, Any]:
        found: dict[str, Any] = product_defaults() if self.product_defaults else {}
        if self.outcome_flush == "grouped":
            found.setdefault("callbacks", {}).update(GROUPED_FLUSH["callbacks"])
        return found


def parse_settings(argv: Sequence[str]) -> SoakSettings:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="make soak", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=float(env("TJOBS_SOAK_MINUTES", "120")))
    parser.add_argument("--rate", type=float, default=float(env("TJOBS_SOAK_RATE", "1000")), help="fires/s")
    parser.add_argument("--one-shot-share", type=float, default=0.2)
    parser.add_argument("--round-s", type=float, default=300.0, help="length of one bookkeeping round")
    parser.add_argument("--fault-period-s", type=float, default=60.0, help="one fault every this many seconds")
    parser.add_argument("--sample-every-s", type=float, default=10.0)
    parser.add_argument("--settle-s", type=float, default=40.0)
    parser.add_argument("--watch-s", type=float, default=30.0)
    parser.add_argument(
        "--outcome-flush", choices=["default", "grouped"], default=env("TJOBS_SOAK_OUTCOME_FLUSH", "default")
    )
    parser.add_argument("--product-defaults", action="store_true")
    parser.add_argument(
        "--max-concurrency", type=int, default=100, help="each round's app: callbacks in flight at once, per node"
    )
    parser.add_argument("--faults", default=",".join(KINDS), help=f"the kinds cycled, in order (of {','.join(KINDS)})")
    parser.add_argument("--out", type=Path, default=Path(env("TJOBS_SOAK_OUT", str(REPO / ".services" / "soak"))))
    args = parser.parse_args(argv)
    unknown = set(args.faults.split(",")) - set(KINDS) - {""}
    if unknown:
        parser.error(f"unknown fault kinds: {sorted(unknown)}")
    return SoakSettings(
        minutes=args.minutes,
        rate_per_s=args.rate,
        one_shot_share=args.one_shot_share,
        round_s=args.round_s,
        fault_period_s=args.fault_period_s,
        sample_every_s=args.sample_every_s,
        settle_s=args.settle_s,
        watch_s=args.watch_s,
        outcome_flush=args.outcome_flush,
        product_defaults=args.product_defaults,
        max_concurrency=args.max_concurrency,
        faults=tuple(k for k in args.faults.split(",") if k),
        out_dir=args.out,
        state_dir=Path(env("TJOBS_SOAK_DIR", str(REPO / ".services" / "soak-rig"))),
        mysql_ports=env("TJOBS_SOAK_MYSQL_PORTS", "18000 18001"),
        etcd_port=int(env("TJOBS_SOAK_ETCD_PORT", "18002")),
        redis_port=int(env("TJOBS_SOAK_REDIS_PORT", "18004")),
    )


def _rig_running(state_dir: Path) -> bool:
    for pidfile in state_dir.glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pidfile.read_text().strip()), 0)
            return True
    return False


def _processlist(infra: Infra) -> list[int | None]:
    """Connections each database server holds (information_schema.PROCESSLIST, less this one)."""
    import pymysql
    from sqlalchemy.engine import make_url

    counts: list[int | None] = []
    for text in infra.storage_urls:
        url = make_url(text)
        try:
            connection = pymysql.connect(
                host=url.host,
                port=url.port or 3306,
                user=url.username or "root",
                password=url.password or "",
                connect_timeout=3,
                read_timeout=5,
            )
        except pymysql.Error:
            counts.append(None)
            continue
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND <> 'Daemon'")
                row = cursor.fetchone()
                counts.append(int(row[0]) - 1 if row else None)
        except pymysql.Error:
            counts.append(None)
        finally:
            connection.close()
    return counts


class Soak:
    def __init__(self, settings: SoakSettings, cluster: SoakCluster, api: Api, run_dir: Path) -> None:
        self.settings = settings
        self.cluster = cluster
        self.api = api
        self.run_dir = run_dir
        self.active: list[Round] = []
        self.nemesis = Nemesis(cluster, api, self._current_app)
        self.tally = Tally()
        self.judged: list[dict[str, Any]] = []
        self.started_ms: int | None = None  # the first round's start, once run began
        self.samples: list[Sample] = []
        self.server_samples: list[dict[str, Any]] = []
        self.lateness_samples: list[dict[str, Any]] = []
        self.driver_samples: list[dict[str, Any]] = []  # this process (receivers, client, bookkeeping), its proxy
        self._seen: dict[int, int] = {}
        self.errors: list[str] = []

    def _current_app(self) -> str:
        now = now_ms()
        for round_ in self.active:
            if round_.app_id and round_.plan.start_ms <= now <= round_.plan.end_ms:
                return round_.app_id
        return next(r.app_id for r in reversed(self.active) if r.app_id)

    def plans(self, first_start_ms: int) -> list[RoundPlan]:
        s = self.settings
        total_ms = int(s.minutes * 60_000)
        round_ms = int(min(s.round_s, s.minutes * 60) * 1000)
        intervals = round(s.rate_per_s * (1 - s.one_shot_share) * EVERY_MS / 1000)
        plans: list[RoundPlan] = []
        start = first_start_ms
        while start < first_start_ms + total_ms:
            end = min(start + round_ms, first_start_ms + total_ms) - EVERY_MS
            plans.append(
                RoundPlan(
                    len(plans),
                    start,
                    end,
                    intervals,
                    s.rate_per_s * s.one_shot_share,
                    s.settle_s,
                    s.watch_s,
                    s.max_concurrency,
                )
            )
            start += round_ms
        return plans

    async def run(self) -> tuple[int, int]:
        s = self.settings
        probe = self.plans(0)[0]
        first_start_ms = (now_ms() + registration_lead_ms(probe.interval_tasks) + 5000) // 1000 * 1000
        self.started_ms = first_start_ms
        plans = self.plans(first_start_ms)
        plan = fault_schedule(s.minutes * 60, period_s=s.fault_period_s, kinds=s.faults)
        log.info(
            "soak: %g min at %g fires/s, %d rounds of %d interval tasks + %g one-shots/s, %d faults",
            s.minutes,
            s.rate_per_s,
            len(plans),
            probe.interval_tasks,
            probe.one_shots_per_s,
            len(plan),
        )
        nemesis = asyncio.create_task(self.nemesis.run(plan, first_start_ms))
        sampler = asyncio.create_task(self._sample_forever())
        rounds: list[asyncio.Task[None]] = []
        try:
            for round_plan in plans:
                wait_ms = round_plan.start_ms - registration_lead_ms(round_plan.interval_tasks) - now_ms()
                if wait_ms > 0:
                    await asyncio.sleep(wait_ms / 1000)
                round_ = Round(self.cluster, self.nemesis, round_plan, seed=round_plan.index)
                self.active.append(round_)
                rounds.append(asyncio.create_task(self._judge(round_)))
            await asyncio.gather(*rounds)
            await nemesis
        finally:
            for task in (nemesis, sampler, *rounds):
                task.cancel()
            await asyncio.gather(nemesis, sampler, *rounds, return_exceptions=True)
        return first_start_ms, first_start_ms + int(s.minutes * 60_000)

    async def _judge(self, round_: Round) -> None:
        """Run and judge one round; a round that could not run is a failure of the soak, not its end."""
        try:
            judged = await round_.run(self.cluster.rig.nodes[1])
        except Exception as error:
            log.exception("round %d could not run", round_.plan.index)
            self.errors.append(f"round {round_.plan.index} could not run: {error!r}")
            return
        finally:
            self.active.remove(round_)
            self._seen.pop(id(round_.receiver), None)
        self.tally.add_round(judged.figures, judged.promises, self.nemesis.records, creates=judged.creates)
        summary = {
            "round": judged.plan.index,
            "start_ms": judged.plan.start_ms,
            "end_ms": judged.plan.end_ms,
            "deadline_ms": judged.deadline_ms,
            "expected": judged.figures.expected,
            "delivered": judged.figures.delivered,
            "lost": len(judged.figures.lost),
            "duplicate_flows": len(judged.figures.duplicate_flows),
            "phantom": len(judged.figures.phantom),
            "attempt_reuse": len(judged.figures.attempt_reuse),
            "requests": judged.requests,
            "flows": judged.flows,
            "creates": judged.creates,
            "stops_ms": round_.stops_ms,
        }
        log.info("round %s", json.dumps(summary))
        if any(judged.evidence.values()):  # soak.json only: the requests behind the examples
            summary["evidence"] = judged.evidence
        self.judged.append(summary)

    async def _sample_forever(self) -> None:
        ports = self.cluster.ports()
        while True:
            await asyncio.sleep(self.settings.sample_every_s)
            at = now_ms()
            remote = remote_ports_by_inode()  # the machine's whole TCP table: once for the three
            for index in range(1, NODES + 1):
                self.samples.append(sample_node(index, self.cluster.pid(index), at, ports, remote))
            driver = sample_node(0, os.getpid(), at, {})
            driver_cpu_s = sum(os.times()[:2])
            proxy_pid = self.cluster.proxy.pid
            proxy_cpu_s = (cpu_s(proxy_pid) if proxy_pid is not None else None) or 0.0
            self.driver_samples.append(
                {
                    "at_ms": at,
                    "rss_kb": driver.rss_kb,
                    "fds": driver.fds,
                    "cpu_s": round(driver_cpu_s, 2),
                    "proxy_cpu_s": round(proxy_cpu_s, 2),
                }
            )
            counts = await asyncio.to_thread(_processlist, self.cluster.infra)
            self.server_samples.append({"at_ms": at, "processlist": counts})
            late: list[int] = []
            for round_ in list(self.active):
                callbacks = round_.receiver.callbacks
                start = self._seen.get(id(round_.receiver), 0)
                late.extend(c.received_ms - c.scheduled_at_ms for c in callbacks[start:] if c.attempt == 1)
                self._seen[id(round_.receiver)] = len(callbacks)
            self.lateness_samples.append(
                {
                    "at_ms": at,
                    "first_sends": len(late),
                    "p50_ms": percentile(late, 0.5),
                    "p99_ms": percentile(late, 0.99),
                    "max_ms": max(late, default=0),
                }
            )
            rss = " ".join(
                f"node{s.node}={s.rss_kb // 1024}MB/{s.fds}fd/{s.db_connections}db/{s.state}"
                for s in self.samples[-NODES:]
            )
            log.info(
                "sample %s processlist=%s first_sends=%d p99=%d ms", rss, counts, len(late), percentile(late, 0.99)
            )

    def write_report(self, started_ms: int, ended_ms: int, wall_s: float) -> int:
        s = self.settings
        # the first minute is warm-up (pools filling, first loads): the trend is judged from then on
        found = trends(self.samples, from_ms=started_ms + 60_000, until_ms=ended_ms)
        reasons = [*self.errors, *failures(self.tally, found)]
        header = {
            "minutes": s.minutes,
            "rate_per_s": s.rate_per_s,
            # what the nodes ran with: TJOBS_CALLBACKS__* in the environment win over the config file
            "outcome_flush": outcome_flush() if s.outcome_flush == "default" else "500ms/2500",
            "settings": "product defaults" if s.product_defaults else "fault-suite fast settings",
            "wall_s": round(wall_s),
        }
        report = {
            "header": header,
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(s).items()},
            "tally": self.tally.as_dict(),
            "verdict": {"passed": not reasons, "failures": reasons},
            "faults": [
                {
                    **asdict(r),
                    "lateness": self.tally.per_fault[r.start_ms].summary()
                    if r.start_ms in self.tally.per_fault
                    else None,
                }
                for r in self.nemesis.records
            ],
            "rounds": self.judged,
            "trends": [{**asdict(t), "growth": t.growth} for t in found],
            "samples": sample_dicts(self.samples),
            "server_samples": self.server_samples,
            "lateness_samples": self.lateness_samples,
            "driver_samples": self.driver_samples,
            "load_average": os.getloadavg(),
        }
        (self.run_dir / "soak.json").write_text(json.dumps(report, indent=1))
        text = text_report(self.tally, found, self.nemesis.records, reasons, header)
        if self.server_samples:
            first, last = self.server_samples[0]["processlist"], self.server_samples[-1]["processlist"]
            text += f"database server connections (processlist) first -> last sample: {first} -> {last}\n"
        if len(self.driver_samples) > 1:
            first, last = self.driver_samples[0], self.driver_samples[-1]
            span_s = max((last["at_ms"] - first["at_ms"]) / 1000, 1)
            busy = (last["cpu_s"] - first["cpu_s"]) / span_s
            proxy_busy = (last["proxy_cpu_s"] - first["proxy_cpu_s"]) / span_s
            text += (
                f"driver (receivers, client, bookkeeping): {busy:.0%} of a core, "
                f"RSS {first['rss_kb'] // 1024} -> {last['rss_kb'] // 1024} MB; "
                f"its TCP proxy (a process of its own): {proxy_busy:.0%} of a core\n"
            )
        text += f"report: {self.run_dir / 'soak.json'}\n"
        (self.run_dir / "soak.txt").write_text(text)
        sys.stdout.write(text)
        return 0 if not reasons else 1


async def soak(settings: SoakSettings) -> int:
    started = time.monotonic()
    run_dir = settings.out_dir / datetime.now(UTC).strftime("soak-%Y%m%dT%H%M%SZ")
    (run_dir / "nodes").mkdir(parents=True, exist_ok=True)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    started_here = not _rig_running(settings.state_dir)
    infra = await asyncio.to_thread(
        start_infra,
        settings.state_dir.resolve(),
        etcd_port=settings.etcd_port,
        redis_port=settings.redis_port,
        mysql_ports=settings.mysql_ports,
    )
    cancel_on_signals()  # from here on, the finally below stops what this run started
    proxy = ProxyProcess(port_of(infra.storage_urls[CUT_SERVER])).start()
    cluster = SoakCluster(infra, run_dir / "nodes", proxy, settings.overrides())
    api = Api(cluster.rig)
    try:
        await asyncio.to_thread(cluster.rig.migrate)
        await cluster.start_all(api)
        runner = Soak(settings, cluster, api, run_dir)
        try:
            started_ms, ended_ms = await runner.run()
        except asyncio.CancelledError:  # what ran so far is reported (the rounds judged, samples, faults)
            if runner.started_ms is not None:
                runner.errors.append("interrupted (SIGTERM or SIGINT): only the rounds judged before are counted")
                runner.write_report(runner.started_ms, now_ms(), time.monotonic() - started)
            raise
        return runner.write_report(started_ms, ended_ms, time.monotonic() - started)
    finally:
        cluster.heal()
        await api.close()
        await asyncio.to_thread(cluster.rig.stop_all)
        proxy.stop()
        with contextlib.suppress(Exception):
            drop_databases(StorageSettings(urls=infra.storage_urls, database_prefix=cluster.rig.db_prefix))
        if started_here:
            await asyncio.to_thread(
                subprocess.run, [str(CLUSTER_SH), "down"], env=infra.env, capture_output=True, timeout=120, check=False
            )


def cancel_on_signals() -> None:
    """SIGTERM and SIGINT cancel the running task (the soak's main), so that its ``finally`` stops the
    nodes and the rig it started: SIGTERM's default ends the process on the spot, and a shell's ``&``
    leaves SIGINT ignored."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, main.cancel)


def _run(main: Coroutine[Any, Any, int]) -> int:
    """On uvloop when installed, as the nodes run: the driver receives every callback and makes every
    create, and asyncio's per-request overhead is about twice uvloop's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    settings = parse_settings(sys.argv[1:] if argv is None else argv)
    try:
        return _run(soak(settings))
    except asyncio.CancelledError:
        log.error("the soak was interrupted (SIGTERM or SIGINT): its nodes and the rig it started are stopped")
        return 2
    except Exception:
        log.exception("the soak could not run")
        return 2


if __name__ == "__main__":
    sys.exit(main())
