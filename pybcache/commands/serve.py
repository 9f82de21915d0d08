"""``pybcache serve``: the cached-device model as an NBD block device, through nbdkit (docs/serve.md)."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from types import FrameType

from ..bcache.variants import VARIANTS
from ._util import UsageError, emit_json, float_arg, int_arg, parse_size
from .._console import format_table
from ._sync import load_sync, sync_label

ROWS = (("reads", "Reads"), ("writes", "Writes (bypass)"), ("read_bypasses", "Read bypasses"),
        ("cache_inserts", "Cache inserts"), ("stale_reads", "Stale reads"),
        ("stale_cached_blocks", "Stale cached blocks"), ("read_hits", "Read hits"),
        ("miss_collisions", "Miss collisions"), ("nbd_trims", "Trims"), ("nbd_flushes", "Flushes"))


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the cached-device model over NBD (nbdkit) to real clients",
                       description="Exports the cached-device model as a block device through nbdkit: reads go "
                                   "through lookup, check key, tracker check, backing read and replace-insert; "
                                   "writes are bypass writes whose data lands after --write-delay. Every 512-byte "
                                   "sector read carries its block number and version, so a stale read is visible "
                                   "to the client. On SIGINT/SIGTERM prints the model's counters. Needs the Debian "
                                   "packages nbdkit and nbdkit-plugin-dev, and a C compiler.")
    p.add_argument("--sync", default="page", metavar="VARIANT|PATCH.c",
                   help="tracking variant: none (unpatched), global, page (default) or atomic; or a kernel patch's "
                        ".c file, compiled and loaded by the plugin as the model's tracker")
    p.add_argument("--hung-timeout", type=float_arg(0.0, 3600.0, open_low=True), default=None, metavar="S",
                   help="with --sync PATCH.c: seconds any wait or spinlock of the patch may last (default 10)")
    p.add_argument("--size", default="10G", metavar="SIZE", help="device size, a multiple of 4K up to 1T (default 10G)")
    p.add_argument("--write-delay", default="5ms", metavar="TIME",
                   help="time a bypass write's data takes to land, e.g. 0, 500us, 5ms, 1s; at most 10s (default 5ms)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--socket", default=None, metavar="PATH",
                       help="Unix socket to listen on (default: a fresh one in a private temporary directory)")
    where.add_argument("--port", type=int_arg(1, 65535), default=None, metavar="N",
                       help="listen on TCP 127.0.0.1:N instead of a Unix socket (loopback only)")
    p.add_argument("--threads", type=int_arg(1, 1024), default=64, metavar="N",
                   help="nbdkit request threads per connection (default 64)")
    p.add_argument("--json-stats", default=None, metavar="FILE", help="also write the final counters to FILE as JSON")
    p.add_argument("--json", action="store_true", help="print the final counters as JSON (the banner goes to stderr)")
    p.set_defaults(func=run)


class _Stop(Exception):
    """SIGTERM or SIGINT arrived."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def run(args: argparse.Namespace) -> int:
    from ..bcache.nbd.server import Server, ToolMissing
    from ..units import parse_duration

    if args.sync not in VARIANTS and not (args.sync.endswith(".c") or os.path.isfile(args.sync)):
        raise UsageError(f"--sync: unknown value {args.sync!r} (allowed: {', '.join(VARIANTS)}, or PATCH.c)")
    sync = load_sync(args.sync, VARIANTS)   # a patch: compiled now (a compile error exits 2)
    if isinstance(sync, str) and args.hung_timeout is not None:
        raise UsageError("--hung-timeout: applies to a patch (--sync PATCH.c), not to the lab's trackers")
    size = parse_size(args.size, name="--size")
    if size % 4096 or size > 1 << 40:
        raise UsageError(f"--size: must be a multiple of 4K up to 1T, got {args.size!r}")
    try:
        delay = parse_duration(args.write_delay, name="--write-delay")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    server = Server(sync=sync, size=size, write_delay_ns=delay, socket=args.socket, port=args.port,
                    threads=args.threads, hung_timeout=args.hung_timeout)
    banner = sys.stderr if args.json else sys.stdout
    old = {s: signal.signal(s, _raise_stop) for s in (signal.SIGTERM, signal.SIGINT)}
    status = 0
    try:
        try:
            server.start()
        except ToolMissing as exc:
            raise UsageError(str(exc)) from None
        except RuntimeError as exc:
            sys.stderr.write(f"pybcache serve: error: {exc}\n")
            return 1
        print(f"pybcache serve: sync={sync_label(sync)}, {size} bytes, write delay {delay / 1e6:g} ms, at {server.uri}",
              file=banner, flush=True)
        print("pybcache serve: Ctrl-C (SIGINT) or SIGTERM stops it and prints the model's counters",
              file=banner, flush=True)
        while True:
            code = server.wait(timeout=0.5)
            if code is not None:
                sys.stderr.write(f"pybcache serve: nbdkit exited by itself with status {code}\n")
                status = 1
                break
    except _Stop:
        pass
    finally:
        # Counters are read at quiescence: nbdkit drains every write before it writes them.
        for s, h in old.items():
            signal.signal(s, signal.SIG_IGN)
        stats = server.stop()
        for s, h in old.items():
            signal.signal(s, h)
    if stats is None:
        sys.stderr.write("pybcache serve: nbdkit wrote no counters\n")
        return 1
    out = {"config": {"sync": sync_label(sync), "size": size, "write_delay_ns": delay, "uri": server.uri},
           "model": stats}
    if args.json_stats:
        with open(args.json_stats, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
    if args.json:
        emit_json(out)
    else:
        print(format_table(["Counter", "Value"], [[label, f"{stats[key]:,}"] for key, label in ROWS]))
        if not isinstance(sync, str):
            print(f"patch: {sync_label(sync)}; distinct kernel reports: {stats.get('patch_reports', 0)}; "
                  f"tracker error: {stats.get('tracker_error', 0) or 'none'}")
    return status
