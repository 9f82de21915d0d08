"""One module per ``pybcache`` command: ``add_parser(subparsers)`` and ``run(args) -> int``."""
