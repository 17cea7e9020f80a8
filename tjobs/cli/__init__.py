"""The ``tjobs`` command: :mod:`tjobs.cli.main` (``dev``, ``serve``, ``migrate``, ``bench``) and
:mod:`tjobs.cli.api_commands` (``task``, ``app``, ``dlq``, ``import``: the API from a terminal)."""
