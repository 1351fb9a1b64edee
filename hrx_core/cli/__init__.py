"""The ``hrx`` command line."""
