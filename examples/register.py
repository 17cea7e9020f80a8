"""Register tasks with the SDK: a delay, a cron in a time zone, and an idempotent batch.

TJOBS_API_KEY=tjk_... python examples/register.py http://127.0.0.1:9000/tjobs/close-order
"""

from __future__ import annotations

import os
import sys

from tjobs.client import Client, cron, delay, task_request


def main(callback_url: str) -> None:
    with Client(os.environ.get("TJOBS_URL", "http://127.0.0.1:8080"), os.environ["TJOBS_API_KEY"]) as tjobs:
        task = tjobs.create_task(
            "close-order-123", delay(seconds=10), callback_url, key="order-123-close", payload={"order": 123}
        )
        print("registered", task.id, "due", task.next_run_at)
        daily = tjobs.create_task(
            "refresh-ranking", cron("0 9 * * *", timezone="Asia/Shanghai"), callback_url, key="ranking-daily"
        )
        print("daily at", daily.next_run_at)
        batch = tjobs.create_tasks(
            [
                task_request(
                    f"close-order-{n}", delay(minutes=30), callback_url, key=f"order-{n}-close", payload={"order": n}
                )
                for n in range(100)
            ]
        )
        print(f"batch: {batch.created} created, {batch.existing} already there, {batch.failed} failed")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:9000/tjobs/close-order")
