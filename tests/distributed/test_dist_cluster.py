"""The Dask cluster (``pybcache/dist/cluster.py``): the scheduler address, the embedded cluster's arguments, with
``dask.distributed`` stood in for. No cluster."""
from __future__ import annotations

import logging
import sys
import types

import pytest

from pybcache.dist import cluster as dask_cluster


def _stand_in_distributed(monkeypatch, *, unreachable=None):
    events = []

    class Client:
        def __init__(self, target, **kw):
            if unreachable is not None:
                raise unreachable
            events.append(("client", target, kw))
            self.dashboard_link = "http://127.0.0.1:1234/status"

        def close(self):
            events.append("client closed")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()

    class LocalCluster:
        def __init__(self, **kw):
            events.append(("cluster", kw))

        def close(self):
            events.append("cluster closed")

    monkeypatch.setitem(sys.modules, "distributed", types.SimpleNamespace(Client=Client, LocalCluster=LocalCluster))
    monkeypatch.delenv(dask_cluster.SCHEDULER_ENV, raising=False)
    return events


def test_dask_is_available_exactly_when_distributed_imports(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    assert dask_cluster.dask_available() is False
    monkeypatch.setitem(sys.modules, "distributed", types.SimpleNamespace())
    assert dask_cluster.dask_available() is True


@pytest.mark.parametrize("address", ["tcp://h:1", "tls://10.0.0.1:8786", "tcp://my-host.example_1:2", "ucx://h",
                                     "ws://h:65535",
                                     "wss://h:1", " tcp://h:1\n", "tcp://[::1]:8786", "tcp://[fe80::1]"])
def test_a_scheduler_address_is_a_dask_protocol_a_host_and_an_optional_port(address):
    assert dask_cluster.check_scheduler_address(address) == address.strip()


@pytest.mark.parametrize("address", ["", "h:1", "http://h:1", "tcp://", "tcp://a b:1", "tcp://h/path", "xtcp://h:1",
                                     "tcp://h:1 x", "TCP://h:1", "tcp://h:x", "tcp://h:", "tcp://h:0", "tcp://h:65536",
                                     "tcp://h:123456", "tcp://h:1:2", "tcp://::1:8786", "tcp://[::1", "tcp://[h]:1",
                                     "inproc://10.0.0.1/4242/1", "tcp://h:\u0661\u0662", "tcp://h?x,y@z:1"])
def test_anything_else_is_refused_naming_the_option(address):
    with pytest.raises(ValueError,
                       match=r"^--scheduler: expected an address like tcp://HOST:PORT \(PORT 1\.\.65535\), got "):
        dask_cluster.check_scheduler_address(address, name="--scheduler")


def test_a_scheduler_that_is_not_a_string_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match=r"^scheduler must be a str like tcp://HOST:PORT, got int$"):
        dask_cluster.check_scheduler_address(5)


def test_an_existing_scheduler_gets_a_client_with_a_10_s_timeout_closed_after_the_block(monkeypatch):
    events = _stand_in_distributed(monkeypatch)
    with dask_cluster.client_for(scheduler=" tcp://h:1 ") as c:
        assert events == [("client", "tcp://h:1", {"timeout": "10s"})]
        assert c.dashboard_link
    assert events[1:] == ["client closed"]


def test_the_scheduler_comes_from_the_environment_when_none_is_given_and_errors_name_the_variable(monkeypatch):
    events = _stand_in_distributed(monkeypatch)
    monkeypatch.setenv("PYBCACHE_SCHEDULER", "tcp://env:2")
    with dask_cluster.client_for():
        pass
    assert events[0][1] == "tcp://env:2"
    monkeypatch.setenv("PYBCACHE_SCHEDULER", "bogus")
    with pytest.raises(ValueError, match=r"^PYBCACHE_SCHEDULER: expected an address like"):
        with dask_cluster.client_for():
            pass
    monkeypatch.setenv("PYBCACHE_SCHEDULER", "")       # empty: the embedded cluster
    with dask_cluster.client_for(workers=1):
        pass
    assert events[-4][0] == "cluster"


def test_an_unreachable_scheduler_is_a_value_error_naming_it(monkeypatch):
    _stand_in_distributed(monkeypatch, unreachable=OSError("refused"))
    with pytest.raises(ValueError, match=r"^scheduler: cannot reach tcp://h:1: refused$"):
        with dask_cluster.client_for(scheduler="tcp://h:1"):
            pass
    _stand_in_distributed(monkeypatch, unreachable=TimeoutError("slow"))
    with pytest.raises(ValueError, match=r"^scheduler: cannot reach tcp://h:1: slow$"):
        with dask_cluster.client_for(scheduler="tcp://h:1"):
            pass


def test_workers_are_refused_with_an_existing_scheduler_and_outside_1_to_256(monkeypatch):
    events = _stand_in_distributed(monkeypatch)
    with pytest.raises(ValueError, match=r"^workers: only for the embedded cluster, not with an existing scheduler$"):
        with dask_cluster.client_for(scheduler="tcp://h:1", workers=2):
            pass
    for bad in (0, 257):
        with pytest.raises(ValueError, match=r"^workers must be"):
            with dask_cluster.client_for(workers=bad):
                pass
    assert events == []


def test_without_dask_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError,
                       match=r"^dask.distributed is not installed: run python3 -m pip install '\.\[distributed\]' in "
                             r"the pybcache clone, or pip install 'PATH\[distributed\]' with PATH the clone$"):
        with dask_cluster.client_for(workers=1):
            pass


def test_the_embedded_cluster_is_one_thread_per_worker_process_on_a_free_port_and_closed_after(monkeypatch, capsys):
    events = _stand_in_distributed(monkeypatch)
    with dask_cluster.client_for(workers=256):
        assert events == [("cluster", {"n_workers": 256, "threads_per_worker": 1, "processes": True,
                                       "dashboard_address": None, "silence_logs": logging.ERROR,
                                       "scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"}}),
                          ("client", events[1][1], {})]
        assert type(events[1][1]).__name__ == "LocalCluster"     # the client of that cluster
    assert events[2:] == ["client closed", "cluster closed"]
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(dask_cluster.os, "cpu_count", lambda: 6)
    with dask_cluster.client_for():
        pass
    assert events[4][1]["n_workers"] == 6
    monkeypatch.setattr(dask_cluster.os, "cpu_count", lambda: None)
    with dask_cluster.client_for():
        pass
    assert events[8][1]["n_workers"] == 1


def test_the_embedded_clusters_dashboard_is_served_on_request_and_its_address_printed(monkeypatch, capsys):
    events = _stand_in_distributed(monkeypatch)
    with dask_cluster.client_for(workers=1, dashboard=True):
        pass
    kw = events[0][1]
    assert (kw["dashboard_address"], kw["scheduler_kwargs"]) == (":0", None)
    assert capsys.readouterr().err == "pybcache: Dask dashboard at http://127.0.0.1:1234/status\n"


def test_the_embedded_cluster_is_closed_when_the_block_fails(monkeypatch):
    events = _stand_in_distributed(monkeypatch)
    with pytest.raises(KeyError):
        with dask_cluster.client_for(workers=1):
            raise KeyError("x")
    assert events[-2:] == ["client closed", "cluster closed"]
