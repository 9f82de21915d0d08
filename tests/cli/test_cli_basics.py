"""The command line as a newcomer first meets it: ``--version`` and a bare ``pybcache``."""
from __future__ import annotations

from importlib.metadata import version

from helpers.clirun import run_pybcache

import pybcache
from pybcache.commands import COMMANDS
import pytest

pytestmark = pytest.mark.e2e


def test_version_prints_the_installed_distribution_version():
    p = run_pybcache("--version", timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"pybcache {version('pybcache')}" == f"pybcache {pybcache.__version__}"


def test_bare_command_prints_usage_and_every_command_and_exits_2():
    p = run_pybcache(timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("usage: pybcache")
    listed = {line.split()[0] for line in p.stderr.splitlines() if line.startswith("    ") and line.split()}
    assert set(COMMANDS) <= listed, f"commands missing from the usage: {set(COMMANDS) - listed}"
    # the documented contract (docs/design.md, "Commands") - a command dropped from the table is a failure here
    assert {"memory", "race", "explore", "fio", "bench", "writeback", "report"} <= set(COMMANDS)
