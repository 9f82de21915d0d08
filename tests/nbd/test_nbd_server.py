"""``pybcache serve``'s server (``pybcache/bcache/nbd/server.py``) without nbdkit: the tool check and its install
line, the server's arguments, URI and nbdkit command line (stand-ins for the compiled plugin)."""
from __future__ import annotations

from pathlib import Path

import pytest

from pybcache.bcache.nbd import server as serve
from pybcache.bcache.variants import VARIANTS


def test_the_install_line_names_the_missing_tools_and_their_debian_packages():
    assert serve._install_line(["nbdkit"]) == \
        "nbdkit not found: install the Debian package with `sudo apt-get install nbdkit`"
    assert serve._install_line(["nbdkit", "nbdkit-plugin.h", "fio", "nbdcopy"]) == (
        "nbdkit, nbdkit-plugin.h, fio, nbdcopy not found: install the Debian packages with "
        "`sudo apt-get install fio libnbd-bin nbdkit nbdkit-plugin-dev`")
    assert serve._install_line(["fio", "nbdcopy"]).endswith("packages with `sudo apt-get install fio libnbd-bin`")
    assert serve._install_line(["nbdkit", "nbdkit"]).endswith("the Debian package with `sudo apt-get install nbdkit`")


def test_require_tools_raises_naming_only_the_tools_not_on_path(monkeypatch):
    present = {"nbdkit"}
    looked = []

    def which(tool):
        looked.append(tool)
        return f"/usr/bin/{tool}" if tool in present else None

    monkeypatch.setattr(serve.shutil, "which", which)
    assert serve.require_tools("nbdkit") is None
    with pytest.raises(serve.ToolMissing) as ex:
        serve.require_tools("nbdcopy", "nbdkit", "fio")
    assert str(ex.value) == serve._install_line(["nbdcopy", "fio"])
    assert looked == ["nbdkit", "nbdcopy", "nbdkit", "fio"]
    assert issubclass(serve.ToolMissing, RuntimeError)


def _patch(name="mine", path="/src/mine.c", library="/cache/mine.so"):
    from pybcache.bcache.kpatch.load import KernelPatch
    p = KernelPatch.__new__(KernelPatch)
    p.name, p.path, p.library = name, path, library
    return p


def test_a_server_keeps_its_options_and_starts_with_nothing_running():
    s = serve.Server()
    assert (s.sync, s.size, s.write_delay_ns, s.threads, s.chunk_size, s.plugin, s.port) == \
        ("page", 10 << 30, 5_000_000, 64, 32 << 20, "c", None)
    assert s.patch is None and s.hung_timeout is None and s.stats is None and s.pid is None and s.socket is None
    s = serve.Server(sync="none", size=4096, write_delay_ns=0, socket=Path("/run/x.sock"), threads=1,
                     chunk_size=512, plugin="python")
    assert (s.sync, s.size, s.write_delay_ns, s.threads, s.chunk_size, s.plugin) == \
        ("none", 4096, 0, 1, 512, "python")
    assert s.socket == "/run/x.sock" and isinstance(s.socket, str)
    for sync in VARIANTS:
        assert serve.Server(sync=sync).sync == sync


def test_a_server_with_a_patch_names_it_and_takes_a_hung_timeout():
    p = _patch()
    s = serve.Server(sync=p, hung_timeout=2.5)
    assert s.patch is p and s.sync == "mine (/src/mine.c)" and s.hung_timeout == 2.5
    assert serve.Server(sync=p, hung_timeout=3600).hung_timeout == 3600
    assert serve.Server(sync=p).hung_timeout is None


@pytest.mark.parametrize("kw,exc,message", [
    ({"sync": "spin"}, ValueError, "sync must be one of none, global, page, atomic, a KernelPatch or a patch's "
                                   ".c file, got 'spin'"),
    ({"sync": 3}, ValueError, "sync must be one of none, global, page, atomic, a KernelPatch or a patch's .c file, "
                              "got 3"),
    ({"hung_timeout": 1.0}, ValueError, "hung_timeout applies to a patch (sync=KernelPatch or a .c path), not to the "
                                        "lab's trackers"),
    ({"size": 4096.0}, TypeError, "size must be an int, got float"),
    ({"write_delay_ns": True}, TypeError, "write_delay_ns must be an int, got bool"),
    ({"threads": "4"}, TypeError, "threads must be an int, got str"),
    ({"chunk_size": 1.0}, TypeError, "chunk_size must be an int, got float"),
    ({"size": 0}, ValueError, "size must be a positive multiple of 4096 up to 1099511627776 (1 TiB), got 0"),
    ({"size": 4097}, ValueError, "size must be a positive multiple of 4096 up to 1099511627776 (1 TiB), got 4097"),
    ({"size": (1 << 40) + 4096}, ValueError, "size must be a positive multiple of 4096 up to 1099511627776 (1 TiB), "
                                             "got 1099511631872"),
    ({"write_delay_ns": -1}, ValueError, "write_delay_ns must be in [0, 10000000000], got -1"),
    ({"write_delay_ns": 10 ** 10 + 1}, ValueError, "write_delay_ns must be in [0, 10000000000], got 10000000001"),
    ({"threads": 0}, ValueError, "threads must be in [1, 1024], got 0"),
    ({"threads": 1025}, ValueError, "threads must be in [1, 1024], got 1025"),
    ({"chunk_size": 256}, ValueError, "chunk_size must be a power of two >= 512, got 256"),
    ({"chunk_size": 768}, ValueError, "chunk_size must be a power of two >= 512, got 768"),
    ({"port": 0}, ValueError, "port must be an int in [1, 65535], got 0"),
    ({"port": 65536}, ValueError, "port must be an int in [1, 65535], got 65536"),
    ({"port": True}, ValueError, "port must be an int in [1, 65535], got True"),
    ({"port": "80"}, ValueError, "port must be an int in [1, 65535], got '80'"),
    ({"port": 1234, "socket": "/tmp/x.sock"}, ValueError, "socket and port are exclusive: a server listens on one "
                                                          "of them"),
    ({"plugin": "rust"}, ValueError, "plugin must be 'c' or 'python', got 'rust'"),
])
def test_a_server_refuses_each_bad_argument_by_name_with_its_type_or_range(kw, exc, message):
    with pytest.raises(exc) as ex:
        serve.Server(**kw)
    assert type(ex.value) is exc and str(ex.value) == message


@pytest.mark.parametrize("kw,message", [
    ({"chunk_size": 64 << 20}, "sync (a patch) and chunk_size are mutually exclusive: chunk_size applies to the "
                               "lab's trackers, not to a patch"),
    ({"plugin": "python"}, "sync (a patch) needs plugin='c'"),
    ({"hung_timeout": 0}, "hung_timeout must be a number of seconds in (0, 3600], got 0"),
    ({"hung_timeout": 3600.5}, "hung_timeout must be a number of seconds in (0, 3600], got 3600.5"),
    ({"hung_timeout": True}, "hung_timeout must be a number of seconds in (0, 3600], got True"),
    ({"hung_timeout": "1"}, "hung_timeout must be a number of seconds in (0, 3600], got '1'"),
])
def test_a_server_with_a_patch_refuses_the_lab_options_and_a_bad_hung_timeout(kw, message):
    with pytest.raises(ValueError) as ex:
        serve.Server(sync=_patch(), **kw)
    assert str(ex.value) == message


def test_a_server_takes_the_bounds_of_each_range():
    for kw in ({"size": 1 << 40}, {"write_delay_ns": 10 ** 10}, {"threads": 1024}, {"port": 1}, {"port": 65535},
               {"chunk_size": 1 << 40}):
        s = serve.Server(**kw)
        for k, v in kw.items():
            assert getattr(s, k) == v


def test_the_uri_is_the_tcp_port_on_localhost_else_the_unix_socket():
    assert serve.Server(port=10809).uri == "nbd://127.0.0.1:10809/"
    assert serve.Server(socket="/run/p.sock").uri == "nbd+unix:///?socket=/run/p.sock"


@pytest.fixture
def plugin(monkeypatch):
    built = []

    def build_plugin():
        built.append(True)
        return Path("/cache/pyb-nbdkit.so")

    monkeypatch.setattr(serve, "build_plugin", build_plugin)
    return built


def test_the_nbdkit_command_runs_the_c_plugin_on_the_socket_with_the_models_options(plugin):
    s = serve.Server(sync="atomic", size=1 << 30, write_delay_ns=7, socket="/run/s.sock", threads=3,
                     chunk_size=1 << 20)
    assert s._command("/tmp/st.json", "/tmp/pid") == [
        "nbdkit", "--foreground", "--exit-with-parent", "-P", "/tmp/pid", "--threads", "3", "-U", "/run/s.sock",
        "/cache/pyb-nbdkit.so", "size=1073741824", "sync=atomic", "write_delay_ns=7", "chunk_size=1048576",
        "stats=/tmp/st.json"]


def test_the_nbdkit_command_listens_on_localhost_for_a_port_and_runs_the_python_plugin_when_asked(plugin):
    s = serve.Server(port=10809, plugin="python")
    assert s._command("st", "pid") == [
        "nbdkit", "--foreground", "--exit-with-parent", "-P", "pid", "--threads", "64", "-i", "127.0.0.1",
        "-p", "10809", "python", str(serve._PYTHON_PLUGIN), "size=10737418240", "sync=page",
        "write_delay_ns=5000000", "chunk_size=33554432", "stats=st"]
    assert plugin == []                            # the C plugin is not built for the Python one


def test_the_nbdkit_command_for_a_patch_loads_its_compiled_library_with_its_hung_bound(plugin, monkeypatch):
    # the patch's own build (load_patch compiled it, with its include folders): never a second compile
    import pybcache.bcache.kpatch.load
    monkeypatch.setattr(pybcache.bcache.kpatch.load, "compile_patch", lambda *a, **kw: pytest.fail("compiled"))
    s = serve.Server(sync=_patch(), socket="/s", hung_timeout=2.5, write_delay_ns=9, size=8192)
    assert s._command("st", "pid") == [
        "nbdkit", "--foreground", "--exit-with-parent", "-P", "pid", "--threads", "64", "-U", "/s",
        "/cache/pyb-nbdkit.so", "size=8192", "patch=/cache/mine.so", "write_delay_ns=9", "stats=st",
        "hung_ns=2500000000"]
    assert serve.Server(sync=_patch(), socket="/s")._command("st", "pid")[-1] == "stats=st"
    assert serve.Server(sync=_patch(), socket="/s", hung_timeout=1e-10)._command("st", "pid")[-1] == "hung_ns=1"


def test_a_server_never_started_is_not_alive_and_stops_waits_and_reports_nothing():
    s = serve.Server()
    assert s.alive() is False and s.pid is None and s.wait(0.01) is None
    assert s.stop() is None and s.stats is None and s._error_text() == ""
