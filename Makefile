# Everything goes through scripts/ so that each target also works without make.
#   make dev     embedded node with the demo app (extra args: make dev ARGS="--port 9090")
#   make check   the inner loop: format, lint, mypy --strict and the tests that need no service (scripts/check.sh)
#   make test    .venv + real MariaDB/etcd/Redis/RabbitMQ/NATS + pytest, all but `chaos` (make test ARGS="-k wheel")
#   make unit    tests/unit only, no services
#   make lint    ruff format --check + ruff + mypy --strict (also run by .ci/run)
#   make chaos   the long failure-injection suites (-m chaos)
#   make chaos-grouped  the same with the grouped outcome flush (500 ms / 2,500) on every node
#   make soak    the nemesis soak: 2 h at 1,000 fires/s under cycling faults (make soak ARGS="--minutes 10 --rate 200")
#   make bench   benchmarks (python -m benchmarks): make bench ARGS="fire --embedded", ARGS="<name> --help"
#   make bench-db-up | bench-db-down   the benchmarks' own MariaDB on 3391, sized for them (scripts/bench_db.sh)
#   make services-up | services-status | services-down

ARGS ?=

.PHONY: help dev check test unit lint chaos chaos-grouped soak bench bench-db-up bench-db-down venv services-up services-status services-down

help:
	@sed -n 's/^#   //p' Makefile

venv:
	bash scripts/venv.sh

dev:
	bash scripts/dev.sh $(ARGS)

check:
	bash scripts/check.sh $(ARGS)

test:
	bash scripts/test.sh $(ARGS)

unit:
	TJOBS_TEST_NO_SERVICES=1 bash scripts/test.sh tests/unit $(ARGS)

lint:
	bash scripts/lint.sh

chaos:
	TJOBS_TEST_TIMEOUT_S=$${TJOBS_TEST_TIMEOUT_S:-1800} bash scripts/test.sh -m chaos $(ARGS)

# Every node the suites start inherits these (TJOBS_* settings override the rigs' config files).
chaos-grouped:
	TJOBS_CALLBACKS__OUTCOME_FLUSH_MS=500 TJOBS_CALLBACKS__OUTCOME_FLUSH_BATCH=2500 \
	TJOBS_TEST_TIMEOUT_S=$${TJOBS_TEST_TIMEOUT_S:-1800} bash scripts/test.sh -m chaos $(ARGS)

soak:
	bash scripts/soak.sh $(ARGS)

bench:
	bash scripts/bench.sh $(ARGS)

bench-db-up:
	bash scripts/bench_db.sh up

bench-db-down:
	bash scripts/bench_db.sh down

services-up:
	bash scripts/services.sh up

services-status:
	bash scripts/services.sh status

services-down:
	bash scripts/services.sh down
