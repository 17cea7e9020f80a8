"""The nemesis soak (``make soak``): hours of steady firing on the fault suite's cluster while a nemesis
cycles faults through it, judged at the end (docs/testing.md, "The nemesis soak").

``schedule`` plans the faults and ``report`` does the arithmetic (both pure, unit-tested in
``tests/unit/test_soak_schedule.py`` and ``tests/unit/test_soak_report.py``); ``nemesis`` runs the faults,
``sampler`` reads the nodes' resources, ``rounds`` drives the workload and ``__main__`` ties them together.
"""
