"""The GPU+NPU examples (examples/*.py run these; ``hrx demo`` runs two of them).

Each module has a ``run(...)`` returning a plain dict of timings and checks, and a
``main(argv)`` for the command line.
"""
