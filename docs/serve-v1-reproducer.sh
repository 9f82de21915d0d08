#!/usr/bin/env bash
# The v1 cover letter's reproducer (a delayed 4 KiB bypass write, a read inside the window, a read
# after it) with real tools: `pybcache serve` and nbdcopy (Debian libnbd-bin). For each variant it
# serves a one-block device whose bypass writes land DELAY after their invalidation, writes the block
# in the background, reads it during the window, waits for the write, and reads it again. Each read
# prints the version in the first sector's header (bytes 16..23): 0 = the data before the write.
# The unpatched model (none) returns 0 after the write completed - a stale read, counted by the
# server's oracle too; page returns the write's version.
#
# usage: docs/serve-v1-reproducer.sh [VARIANTS...]   (default: none page; DELAY=2s, DURING=0.5 by default:
#        the read comes DURING seconds into the DELAY-long window)
set -euo pipefail
DELAY=${DELAY:-2s}
PYBCACHE=${PYBCACHE:-pybcache}
work=$(mktemp -d)
trap 'kill "${server:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
head -c 4096 /dev/zero | tr '\0' '\1' >"$work/block"          # the 0x01 pattern of the cover letter
version() { nbdcopy "nbd+unix:///?socket=$work/sock" - | od -A n -t u8 -j 16 -N 8 | tr -d ' '; }

for variant in "${@:-none page}"; do
  for v in $variant; do
    "$PYBCACHE" serve --sync "$v" --size 4K --write-delay "$DELAY" --socket "$work/sock" \
        --json-stats "$work/stats.json" >"$work/serve.log" &
    server=$!
    # up to 120 s: the first serve compiles its plugin (longer on a loaded machine); the socket file
    # appears at bind(), before nbdkit listens, so wait until a client's handshake succeeds
    for _ in $(seq 2400); do nbdinfo --size "nbd+unix:///?socket=$work/sock" >/dev/null 2>&1 && break; sleep 0.05; done
    nbdcopy "$work/block" "nbd+unix:///?socket=$work/sock" &   # the bypass write: replies after DELAY
    writer=$!
    sleep "${DURING:-0.5}"                                       # the read lands inside the window
    during=$(version)
    wait "$writer"
    after=$(version)
    kill -INT "$server"; wait "$server"; server=
    stale=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['model']; \
print(m['stale_reads'], m['stale_cached_blocks'])" "$work/stats.json")
    echo "$v: read during the write: version $during; read after it: version $after; server oracle: stale reads, stale cached blocks = $stale"
  done
done
