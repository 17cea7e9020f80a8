"""``python -m tjobs.cli``: the same as the ``tjobs`` command."""

from tjobs.cli.main import main

main()
