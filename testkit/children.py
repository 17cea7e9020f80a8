"""Starting a module of this checkout as a child process (``python -m testkit.sink``, ``-m benchmarks.…``).

``testkit`` and ``benchmarks`` are not installed: they are importable from the repository root. A child
started with ``-m`` finds them whatever the parent's working directory is, because its ``PYTHONPATH``
starts with that root (:func:`checkout_env`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The repository root: the directory holding ``testkit/``, ``benchmarks/`` and ``tjobs/``."""


def checkout_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment by default) with the repository root first on ``PYTHONPATH``."""
    env = dict(os.environ if base is None else base)
    paths = [str(REPO), *(path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env
