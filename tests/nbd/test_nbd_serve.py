"""Integration tests of `pybcache serve` and `pybcache fio --engine nbd` with real servers (nbdkit) and
real clients (fio, and a raw NBD client that can send what libnbd refuses to).

They need the Debian packages fio, nbdkit, nbdkit-plugin-dev and a C compiler. Without them they skip,
except in CI (CI set), where .ci/run installs the packages and a missing tool is a failure. Every server
is started with --exit-with-parent on a Unix socket in a private directory and stopped by a finalizer;
every client loop is bounded in operations and time.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time

import pytest
from helpers.clirun import pybcache_executable, run_pybcache
from helpers.nbd_client import BLOCK, CMD_WRITE, Client, NbdError, decode

pytestmark = [pytest.mark.native, pytest.mark.e2e]

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository
MISSING = [t for t in ("nbdkit", "fio", "cc") if shutil.which(t) is None]
if not os.path.exists("/usr/include/nbdkit-plugin.h"):
    MISSING.append("nbdkit-plugin.h")
needs_tools = pytest.mark.skipif(bool(MISSING) and not os.environ.get("CI"),
                                 reason=f"missing {', '.join(MISSING)} (apt-get install fio nbdkit nbdkit-plugin-dev)")
MiB = 1 << 20
EINVAL, ENOSPC = 22, 28


@pytest.fixture(scope="module")
def plugin_cache(tmp_path_factory: pytest.TempPathFactory):
    """A private compile cache for this module's servers (and the CLI runs, which inherit it)."""
    old = os.environ.get("PYBCACHE_CACHE_DIR")
    os.environ["PYBCACHE_CACHE_DIR"] = str(tmp_path_factory.mktemp("pybcache-cache"))
    yield
    if old is None:
        del os.environ["PYBCACHE_CACHE_DIR"]
    else:
        os.environ["PYBCACHE_CACHE_DIR"] = old


@pytest.fixture
def serve(plugin_cache):
    """Start servers that are always stopped at teardown."""
    from pybcache.bcache.nbd.server import Server

    started: list[Server] = []

    def start(**kw) -> Server:
        server = Server(**kw)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


# -- fio --------------------------------------------------------------------------------------------

@needs_tools
def test_fio_against_unpatched_model_with_write_delay_finds_stale_reads(plugin_cache):
    from pybcache.bcache.nbd.fio import fio_nbd

    # 4 MiB: 32 write targets of 128 KiB, so reads keep landing in write windows and then hitting what
    # they cached. The unpatched model caches old data in the window; later reads hit it.
    res = fio_nbd(size=4 * MiB, jobs=2, seconds=2.0, variants=["none"], write_delay_ns=2_000_000)
    model = res["rows"][0]["model"]
    assert model["writes"] > 0 and model["reads"] > 0
    assert model["stale_reads"] > 0, model


@needs_tools
def test_fio_cli_against_tracked_variants_finds_no_stale_reads(plugin_cache):
    r = run_pybcache("fio", "--engine", "nbd", "--json", "--size", "4M", "--seconds", "1.5", "--jobs", "2",
                     "--variants", "global,page,atomic", "--write-delay", "2ms", timeout=180)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert [row["variant"] for row in res["rows"]] == ["global", "page", "atomic"]
    for row in res["rows"]:
        assert set(row["fio"]) >= {"read_iops", "write_iops", "read_lat_mean_ms", "read_lat_p99_ms",
                                   "write_lat_mean_ms", "write_lat_p99_ms"}
        assert set(row["model"]) >= {"reads", "writes", "read_bypasses", "cache_inserts", "stale_reads",
                                     "stale_cached_blocks"}
        assert row["fio"]["read_iops"] > 0 and row["fio"]["write_iops"] > 0
        assert row["model"]["stale_reads"] == 0, row
        assert row["model"]["stale_cached_blocks"] == 0, row
        assert row["model"]["read_bypasses"] > 0, row  # the tracker did see writes in flight


# -- protocol edge cases ------------------------------------------------------------------------------

@needs_tools
def test_reads_carry_block_number_version_and_offset_in_every_sector(serve):
    server = serve(sync="page", size=1 * MiB, write_delay_ns=0)
    with Client(server.socket) as c:
        assert c.size == 1 * MiB
        assert {v for _, v, _ in decode(c.pread(0, 2 * BLOCK), 0)} == {0}
        c.pwrite(BLOCK, b"\xff" * (2 * BLOCK))
        got = decode(c.pread(BLOCK + 100, 5000), BLOCK + 100)  # unaligned: a slice of the encoding
        assert {b for b, _, _ in got} == {1, 2}
        assert len({v for _, v, _ in got}) == 1 and got[0][1] > 0
        c.pwrite(BLOCK + 512, b"\x00" * 512)  # a partial-block write is a bypass write of that block
        assert decode(c.pread(BLOCK, BLOCK), BLOCK)[0][1] > got[0][1]
        c.flush()
        c.trim(0, BLOCK)  # a discard goes down the bypass path: a new version
        assert decode(c.pread(0, BLOCK), 0)[0][1] > 0
    stats = server.stop()
    assert stats["nbd_flushes"] == 1 and stats["nbd_trims"] == 1 and stats["stale_reads"] == 0


@needs_tools
def test_requests_past_the_end_get_einval_and_the_server_keeps_serving(serve):
    server = serve(sync="page", size=1 * MiB, write_delay_ns=0)
    with Client(server.socket) as c:
        for offset, length in ((1 * MiB, BLOCK), (1 * MiB - 512, 1024), (2 ** 63, BLOCK)):
            with pytest.raises(NbdError) as err:
                c.pread(offset, length)
            assert err.value.errno == EINVAL
        with pytest.raises(NbdError) as err:
            c.pwrite(1 * MiB - 512, b"x" * 1024)
        assert err.value.errno in (EINVAL, ENOSPC)
        assert decode(c.pread(0, BLOCK), 0)[0][0] == 0  # same connection still in sync
    with Client(server.socket) as c:
        assert len(decode(c.pread(1 * MiB - BLOCK, BLOCK), 1 * MiB - BLOCK)) == 8
    assert server.alive()


@needs_tools
def test_zero_length_requests_get_errors_and_the_server_keeps_serving(serve):
    server = serve(sync="page", size=1 * MiB, write_delay_ns=0)
    with Client(server.socket) as c:
        with pytest.raises(NbdError):
            c.pread(0, 0)
        with pytest.raises(NbdError):
            c.pwrite(0, b"")
        with pytest.raises(NbdError):
            c.trim(0, 0)
        assert len(decode(c.pread(0, BLOCK), 0)) == 8
    assert server.stop()["nbd_writes"] == 0


@needs_tools
def test_client_disconnecting_mid_request_leaves_the_server_serving(serve):
    server = serve(sync="page", size=1 * MiB, write_delay_ns=1_000_000)
    half = Client(server.socket)
    half.send_header(CMD_WRITE, 0, 128 * 1024)
    half.sock.sendall(b"y" * 5000)  # a fraction of the payload, then gone
    half.sock.close()
    stuck = Client(server.socket)
    stuck.send_header(0, 0, 64 * BLOCK)  # a read whose reply nobody will take
    stuck.sock.close()
    with Client(server.socket) as c:
        c.pwrite(0, b"z" * BLOCK)
        assert decode(c.pread(0, BLOCK), 0)[0][1] > 0
    assert server.alive()
    stats = server.stop()
    assert stats["nbd_writes"] == 1  # the half-sent write never reached the model
    assert stats["abandoned_writes"] == 0 and stats["stale_cached_blocks"] == 0


@needs_tools
def test_sixteen_connections_for_ten_seconds_lose_nothing(serve):
    """Each client owns every 16th block: its writes must be visible to its next read (a newer version
    than any it saw before), no block may go back in version, every sector must encode its own
    position, and the server must count exactly the requests the clients sent."""
    n_clients, blocks = 16, 1024
    server = serve(sync="page", size=blocks * BLOCK, write_delay_ns=1_000_000, threads=4)
    barrier = threading.Barrier(n_clients)
    deadline_holder: list[float] = []
    counts = [[0, 0] for _ in range(n_clients)]  # reads, writes
    errors: list[BaseException] = []

    def client(i: int) -> None:
        rng = random.Random(i)
        mine = list(range(i, blocks, n_clients))
        seen = dict.fromkeys(mine, 0)
        try:
            with Client(server.socket, timeout=20) as c:
                if barrier.wait(timeout=30) == 0:
                    deadline_holder.append(time.monotonic() + 10.0)
                barrier.wait(timeout=30)
                deadline = deadline_holder[0]
                for _ in range(20_000):  # bounded in count as well as in time
                    if time.monotonic() >= deadline:
                        break
                    b = rng.choice(mine)
                    if rng.random() < 0.3:
                        c.pwrite(b * BLOCK, b"w" * BLOCK)
                        counts[i][1] += 1
                        v = decode(c.pread(b * BLOCK, BLOCK), b * BLOCK)[0][1]
                        counts[i][0] += 1
                        assert v > seen[b], f"block {b}: a write was lost (read {v} after {seen[b]})"
                    else:
                        v = decode(c.pread(b * BLOCK, BLOCK), b * BLOCK)[0][1]
                        counts[i][0] += 1
                        assert v >= seen[b], f"block {b} went back from version {seen[b]} to {v}"
                    seen[b] = v
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a client did not finish"
    assert not errors, errors[0]
    stats = server.stop()
    assert stats["nbd_reads"] == sum(r for r, _ in counts)
    assert stats["nbd_writes"] == sum(w for _, w in counts) > 0
    assert stats["stale_reads"] == 0 and stats["stale_cached_blocks"] == 0
    assert stats["abandoned_writes"] == 0


# -- the command line ---------------------------------------------------------------------------------

@needs_tools
def test_serve_on_sigterm_prints_and_writes_the_model_counters(plugin_cache, tmp_path):
    sock, stats_file = str(tmp_path / "nbd.sock"), tmp_path / "stats.json"
    proc = subprocess.Popen([pybcache_executable(), "serve", "--sync", "page", "--size", "1M", "--write-delay", "0",
                             "--socket", sock, "--json-stats", str(stats_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
    try:
        # Connect until nbdkit listens: its socket file appears at bind(), before listen(), and a sleep after
        # the file appeared (0.1 s here before) was refused whenever nbdkit was descheduled between the two
        # (shown with strace delaying nbdkit's listen() by 300 ms).
        deadline = time.monotonic() + 60  # includes the first compile of the plugin
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                client = Client(sock)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                assert time.monotonic() < deadline, "pybcache serve did not listen"
                time.sleep(0.05)
        with client as c:
            c.pwrite(0, b"a" * BLOCK)
            c.pread(0, BLOCK)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Stale reads" in out and "Cache inserts" in out
    data = json.loads(stats_file.read_text())
    assert data["config"]["sync"] == "page"
    assert data["model"]["writes"] == 1 and data["model"]["reads"] == 1
    assert data["model"]["stale_reads"] == 0
    assert not os.path.exists(sock)


@pytest.mark.parametrize("args", [("serve",), ("fio", "--engine", "nbd", "--size", "1M", "--seconds", "1")])
def test_missing_tools_name_the_debian_packages_and_exit_2(args, tmp_path):
    r = run_pybcache(*args, env={**os.environ, "PATH": str(tmp_path)}, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "apt-get install" in lines[0] and "nbdkit" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args,needle", [
    (("serve", "--size", "1000"), "--size"),
    (("serve", "--write-delay", "soon"), "--write-delay"),
    (("serve", "--write-delay", "11s"), "--write-delay"),
    (("serve", "--sync", "spin"), "--sync"),
    (("serve", "--sync", "mine.c"), "cannot read the patch"),   # a .c that does not exist
    (("serve", "--port", "0"), "--port"),
    (("fio", "--engine", "nbd", "--size", "100K"), "--size"),
    (("fio", "--engine", "nbd", "--write-delay", "-1ms"), "--write-delay"),
    (("fio", "--engine", "nbd", "--variants", "page,page"), "--variants"),
])
def test_bad_serve_and_fio_nbd_arguments_exit_2_with_one_line(args, needle):
    r = run_pybcache(*args, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr


REPRODUCER = os.path.join(_ROOT, "docs",
                          "serve-v1-reproducer.sh")


@needs_tools
@pytest.mark.skipif(not os.path.exists(REPRODUCER), reason="docs/ not beside the tests")
def test_v1_reproducer_script_shows_a_stale_read_without_tracking_and_none_with_page(plugin_cache):
    if shutil.which("nbdcopy") is None and not os.environ.get("CI"):
        pytest.skip("nbdcopy missing (apt-get install libnbd-bin)")
    r = subprocess.run(["bash", REPRODUCER, "none", "page"], capture_output=True, text=True, timeout=120,
                       # a 4 s window and the read 1 s into it: margin for a loaded machine on both sides
                       env={**os.environ, "DELAY": "4s", "DURING": "1", "PYBCACHE": pybcache_executable()})
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.strip().splitlines())
    assert lines["none"].endswith("read after it: version 0; server oracle: stale reads, stale cached blocks = 1 1")
    assert "read after it: version 1;" in lines["page"] and lines["page"].endswith("= 0 0")


# -- bad input to the library, before any tool is looked for --------------------------------------------

@pytest.mark.parametrize("kw,exc,needle", [
    ({"sync": "spin"}, ValueError, "sync"),
    ({"size": 1000}, ValueError, "size"),
    ({"size": 2 << 40}, ValueError, "size"),
    ({"size": 4096.0}, TypeError, "size"),
    ({"write_delay_ns": -1}, ValueError, "write_delay_ns"),
    ({"write_delay_ns": True}, TypeError, "write_delay_ns"),
    ({"threads": 0}, ValueError, "threads"),
    ({"chunk_size": 3000}, ValueError, "chunk_size"),
    ({"port": 70000}, ValueError, "port"),
    ({"port": 1234, "socket": "/tmp/x.sock"}, ValueError, "socket and port"),
    ({"plugin": "rust"}, ValueError, "plugin"),
])
def test_server_refuses_bad_arguments_naming_them(kw, exc, needle):
    from pybcache.bcache.nbd.server import Server

    with pytest.raises(exc, match=needle):
        Server(**kw)


@pytest.mark.parametrize("text,ns", [("0", 0), ("5ms", 5_000_000), ("250us", 250_000), ("1.5s", 1_500_000_000),
                                     ("1500ns", 1500), ("2", 2_000_000_000)])
def test_parse_duration_reads_units(text, ns):
    from pybcache.units import parse_duration

    assert parse_duration(text) == ns


@pytest.mark.parametrize("text", ["", "soon", "-1ms", "5 min", "10.5s", "1e3ms"])
def test_parse_duration_refuses_what_is_not_a_duration_in_range(text):
    from pybcache.units import parse_duration

    with pytest.raises(ValueError, match="--write-delay"):
        parse_duration(text, name="--write-delay")


@pytest.mark.parametrize("kw,needle", [
    ({"variants": ["page", "page"]}, "repeat"),
    ({"variants": ["spin"]}, "variants"),
    ({"size": 4096}, "size"),
    ({"jobs": 0}, "jobs"),
    ({"seconds": 0}, "seconds"),
    ({"rounds": 0}, "rounds"),
    ({"write_delay_ns": -5}, "write_delay_ns"),
])
def test_fio_nbd_refuses_bad_arguments_before_looking_for_tools(kw, needle, monkeypatch, tmp_path):
    from pybcache.bcache.nbd.fio import fio_nbd

    monkeypatch.setenv("PATH", str(tmp_path))  # were the tools looked for first, this would be ToolMissing
    with pytest.raises(ValueError, match=needle):
        fio_nbd(**kw)


# -- a kernel patch as the served model's tracker (issue #13) ---------------------------------------------

_PATCHES = os.path.join(_ROOT, "examples", "patches")
_BAD = os.path.join(_ROOT, "tests", "data")


@needs_tools
def test_serve_with_a_patch_as_tracker_round_trips_and_concurrent_writes_leave_no_stale_read(serve):
    server = serve(sync=os.path.join(_PATCHES, "v3_proposal.c"), size=1 * MiB, write_delay_ns=2_000_000)
    assert server.sync.startswith("v3-proposal (")
    with Client(server.socket) as c:
        assert {v for _, v, _ in decode(c.pread(0, BLOCK), 0)} == {0}
        c.pwrite(0, b"\xff" * BLOCK)
        assert decode(c.pread(0, BLOCK), 0)[0][1] > 0

    def writer() -> None:
        with Client(server.socket) as w:
            for i in range(40):
                w.pwrite((i % 8) * BLOCK, b"\x01" * BLOCK)

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    with Client(server.socket) as r:
        for i in range(200):
            r.pread((i % 8) * BLOCK, BLOCK)
    for t in threads:
        t.join(timeout=60)
    stats = server.stop()
    assert stats["writes"] >= 81 and stats["stale_reads"] == 0 and stats["stale_cached_blocks"] == 0
    assert stats["tracker_error"] == 0 and stats["patch_reports"] == 0


@needs_tools
def test_serve_with_a_patch_that_hangs_answers_eio_instead_of_hanging(serve):
    server = serve(sync=os.path.join(_BAD, "hangs.c"), size=1 * MiB, write_delay_ns=0, hung_timeout=0.2)
    with Client(server.socket) as c:
        with pytest.raises(NbdError) as err:
            c.pwrite(0, b"\x00" * BLOCK)
        assert err.value.errno == 5  # EIO
        with pytest.raises(NbdError):
            c.pread(0, BLOCK)   # the tracker is broken: later requests fail too
    stats = server.stop()
    assert stats["tracker_error"] == -1   # PYB_OPS_EHUNG


@needs_tools
def test_serve_cli_with_a_patch_that_does_not_compile_exits_2(plugin_cache):
    r = run_pybcache("serve", "--sync", os.path.join(_BAD, "syntax_error.c"), timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "error:" in r.stderr
