"""Helpers shared by the test modules (not tests): ``from helpers.clirun import run_pybcache``.

``tests/`` is on sys.path because pytest (the default ``prepend`` import mode) puts the directory of
``tests/conftest.py`` there before it imports any test module; a regular package, so that no other
``helpers`` on sys.path can stand in for it.
"""
