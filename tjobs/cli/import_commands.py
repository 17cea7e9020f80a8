"""``tjobs import FILE``: create every task of a JSONL file (one ``POST /v1/tasks`` body a line) in batches,
resumable (the position is saved in ``FILE.progress``) and idempotent (a line without a ``key`` gets its
content's hash).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tjobs.cli.api_commands import DEFAULT_URL, ApiKey, AsJson, Url, _client, _emit, _fail, err, out
from tjobs.client import TjobsClientError

IMPORT_BATCH = 500


def import_key(line: str) -> str:
    """The idempotency key of a line without one: its content's hash, so a re-import changes nothing."""
    return "import-" + hashlib.sha256(line.strip().encode()).hexdigest()[:40]


def read_requests(path: Path, start_line: int) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if number <= start_line or not line.strip():
                continue
            try:
                body = json.loads(line)
            except json.JSONDecodeError as error:
                raise typer.BadParameter(f"{path}:{number} is not JSON: {error}") from None
            if not isinstance(body, dict):
                raise typer.BadParameter(f"{path}:{number} is not a JSON object")
            body.setdefault("key", import_key(line))
            yield number, body


def import_tasks(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="JSONL: one create request per line")],
    restart: Annotated[bool, typer.Option("--restart", help="ignore the saved position")] = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Create every task in FILE in batches; resumable (FILE.progress) and idempotent (by key)."""
    progress_file = file.with_name(file.name + ".progress")
    start = 0 if restart or not progress_file.exists() else int(progress_file.read_text().strip() or 0)
    with file.open(encoding="utf-8") as handle:
        total = sum(1 for line in handle if line.strip())
    counts = {"created": 0, "existing": 0, "failed": 0}
    failures: list[dict[str, Any]] = []
    with (
        _client(url, api_key, "--api-key") as sdk,
        Progress(
            TextColumn("[bold]import[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err(),
            disable=as_json,
        ) as progress,
    ):
        bar = progress.add_task("tasks", total=total, completed=min(start, total))
        batch: list[tuple[int, dict[str, Any]]] = []

        def flush() -> None:
            result = sdk.create_tasks([body for _, body in batch])
            for (number, _), item in zip(batch, result.items, strict=True):
                if item.error is not None:
                    failures.append({"line": number, **item.error.model_dump()})
            counts["created"] += result.created
            counts["existing"] += result.existing
            counts["failed"] += result.failed
            progress_file.write_text(str(batch[-1][0]))
            progress.advance(bar, len(batch))
            batch.clear()

        try:
            for number, body in read_requests(file, start):
                batch.append((number, body))
                if len(batch) >= IMPORT_BATCH:
                    flush()
            if batch:
                flush()
        except TjobsClientError as error:
            done = progress_file.read_text().strip() if progress_file.exists() else str(start)
            progress.console.print(f"stopped; run the same command again to resume after line {done}")
            raise _fail(error) from None
    summary = {**counts, "failures": failures[:100]}
    if as_json:
        _emit(summary, True)
    else:
        out().print(f"created {counts['created']}, already there {counts['existing']}, failed {counts['failed']}")
        for failure in failures[:20]:
            out().print(f"  line {failure['line']}: {failure['message']}")
    if counts["failed"]:
        raise typer.Exit(2)


__all__ = ["import_tasks"]
