#!/bin/sh
# SPDX-License-Identifier: MIT
# pybcache's init for the User-Mode Linux guest (pybcache/kernel/guest.py boots it with init= this file's
# copy in the run's work dir, whose path comes as the kernel parameter pybwork=..., an environment variable
# here). The host's / is the guest's root through hostfs, read-only but for that work dir, so the host's
# dd, dmsetup and sort run here unchanged.
#
# It builds bcache over dm-delay (writes to the backing device are slowed, reads are not), runs the scenario
# named in $pybwork/params.sh (race or stress), writes its findings into the work dir as plain lines, stops
# and unregisters the devices (so teardown warnings reach the log), saves the kernel log and powers off.
# Every wait is bounded. Each step is echoed as "PYB: ..." on the console: the host reads the last ones
# when the guest hangs.

PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
W="${pybwork:-}"
if [ -z "$W" ] || [ ! -f "$W/params.sh" ]; then
    echo "PYB: FAIL no pybwork= work dir with params.sh"
    exec /bin/sh -c 'while :; do sleep 100; done'
fi
# shellcheck source=/dev/null
. "$W/params.sh"

say() { echo "PYB: $*"; echo "$(cut -d' ' -f1 /proc/uptime) $*" >> "$W/steps.log"; }

poweroff_now() {
    sync
    # systemctl's doubly forced poweroff calls reboot(2) at once, without a running systemd
    systemctl --force --force poweroff >/dev/null 2>&1
    poweroff -f >/dev/null 2>&1
    echo o > /proc/sysrq-trigger 2>/dev/null
    sleep 5
    echo "PYB: FAIL could not power off"
    while :; do sleep 100; done
}

finish() {
    dmesg > "$W/dmesg.txt" 2>/dev/null
    echo "$1" > "$W/finished"
    say "finished: $1"
    poweroff_now
}

fail() { say "FAIL $*"; echo "$*" > "$W/error.txt"; finish error; }

# wait_for TEST-ARGS...: up to 10 s for `test ARGS` to hold
wait_for() {
    n=0
    while ! test "$@"; do
        n=$((n + 1))
        [ $n -gt 100 ] && return 1
        sleep 0.1
    done
    return 0
}

# wr DEV BLOCK LABEL VERSION: one 4 KiB block "pybcache blk=LABEL ver=VERSION\n" + zeros, O_DIRECT
wr() {
    printf 'pybcache blk=%s ver=%s\n' "$3" "$4" |
        dd of="$1" bs=4096 seek="$2" count=1 iflag=fullblock conv=sync,notrunc oflag=direct 2>/dev/null
}

# rd DEV BLOCK [LABEL]: the version of block LABEL (default BLOCK) read at BLOCK of DEV ("?" when what is there
# is not that block's: not one of ours, or another block's record in sectors never written), O_DIRECT
rd() {
    v=$(dd if="$1" bs=4096 skip="$2" count=1 iflag=direct 2>/dev/null | head -c 64 | head -n 1 |
        sed -n "s/^pybcache blk=${3:-$2} ver=\([0-9]*\)\$/\1/p")
    echo "${v:-?}"
}

say "init up"
mount -t proc proc /proc || fail "mount proc"
mount -t sysfs sysfs /sys || fail "mount sysfs"
mount -t devtmpfs devtmpfs /dev || fail "mount devtmpfs"
# scratch space for the tools: a tmpfs on /tmp and /run, unless the work dir is under one of them (the mount
# would hide it: a run under pytest's /tmp/pytest-of-root/...); TMPDIR in the work dir either way
case "$W/" in /tmp/*) ;; *) mount -t tmpfs tmpfs /tmp || fail "mount tmpfs on /tmp" ;; esac
case "$W/" in /run/*) ;; *) mount -t tmpfs tmpfs /run || fail "mount tmpfs on /run" ;; esac
mkdir -p "$W/tmp" && TMPDIR="$W/tmp" && export TMPDIR
[ -d /sys/kernel/debug ] && mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
echo "$(uname -r)" > "$W/uname"

# --- devices -------------------------------------------------------------------------------------------
wait_for -b /dev/ubda || fail "no /dev/ubda"
wait_for -b /dev/ubdb || fail "no /dev/ubdb"
SECTORS=$(cat /sys/block/ubda/size)
# dm-delay starts with no delay, so that bcache's registration and attach (which write the backing
# superblock) are not held; the write delay is loaded once bcache0 is ready
dmsetup create slow --noudevsync \
    --table "0 $SECTORS delay /dev/ubda 0 0 /dev/ubda 0 0" || fail "dmsetup create slow"
wait_for -b /dev/dm-0 || fail "no /dev/dm-0"
# the cache device: the ubd disk itself, or (CACHE_WRITE_FAIL=completion) a dm-linear device over it, so that a
# write the fault injection fails on the disk completes to bcache after bcache's submission has returned, as
# a device's error does
CACHE_DEV=/dev/ubdb
if [ "${CACHE_WRITE_FAIL:-}" = completion ]; then
    dmsetup create cachelin --noudevsync \
        --table "0 $(cat /sys/block/ubdb/size) linear /dev/ubdb 0" || fail "dmsetup create cachelin"
    wait_for -b /dev/dm-1 || fail "no /dev/dm-1"
    CACHE_DEV=/dev/dm-1
fi
echo $CACHE_DEV > /sys/fs/bcache/register || fail "register the cache ($CACHE_DEV)"
echo /dev/dm-0 > /sys/fs/bcache/register || fail "register the backing device (/dev/dm-0)"
wait_for -d /sys/block/bcache0/bcache || fail "no bcache0 after registering"
wait_for -b /dev/bcache0 || fail "no /dev/bcache0"
CSET=""
for d in /sys/fs/bcache/*-*-*-*-*; do [ -d "$d" ] && CSET="$d"; done
[ -n "$CSET" ] || fail "no cache set in /sys/fs/bcache"
state=$(cat /sys/block/bcache0/bcache/state)
[ "$state" = "clean" ] || fail "bcache0 is not attached to the cache set (state: $state)"
# bypass writes (writearound: every write bypasses the cache) or writethrough writes (WRITES=writethrough:
# the data goes to both devices, the backing bio first)
MODE_CACHE=writearound
[ "${WRITES:-bypass}" = writethrough ] && MODE_CACHE=writethrough
echo $MODE_CACHE > /sys/block/bcache0/bcache/cache_mode || fail "cache_mode $MODE_CACHE"
echo 0 > "$CSET/congested_read_threshold_us" || fail "congested_read_threshold_us"
echo 0 > "$CSET/congested_write_threshold_us" || fail "congested_write_threshold_us"
echo 0 > /sys/block/bcache0/bcache/sequential_cutoff || fail "sequential_cutoff"
dmsetup reload slow --table "0 $SECTORS delay /dev/ubda 0 0 /dev/ubda 0 $WRITE_DELAY_MS" ||
    fail "dmsetup reload slow (the write delay)"
dmsetup resume --noudevsync slow || fail "dmsetup resume slow"
dmsetup table slow | grep -q " $WRITE_DELAY_MS\$" || fail "dm-delay does not have the write delay: $(dmsetup table slow)"
say "bcache0 ready: $MODE_CACHE over dm-delay (writes +$WRITE_DELAY_MS ms), cache set ${CSET##*/}"

# --- failslab around one function ------------------------------------------------------------------------
FS=/sys/kernel/debug/failslab
failslab_on() {
    [ -n "${FAIL_SYMBOL:-}" ] || return 0
    [ -d $FS ] || fail "--fail-alloc needs failslab in debugfs (a debug build)"
    # the range [FAIL_START, FAIL_END) comes from the kernel binary's symbol table (nm, on the host: sorting
    # /proc/kallsyms in the guest takes 20 s); check that the running kernel agrees
    grep -q "^0*${FAIL_START#0x} [tT] $FAIL_SYMBOL\$" /proc/kallsyms ||
        fail "/proc/kallsyms does not have $FAIL_SYMBOL at $FAIL_START"
    set -- "${FAIL_START#0x}" "${FAIL_END#0x}"
    echo "0x$1" > $FS/require-start || fail "failslab require-start"
    echo "0x$2" > $FS/require-end || fail "failslab require-end"
    echo 32 > $FS/stacktrace-depth
    echo N > $FS/ignore-gfp-wait
    echo N > $FS/task-filter 2>/dev/null
    echo 1 > $FS/verbose
    echo 1 > $FS/interval
    echo "$FAIL_TIMES" > $FS/times
    echo 100 > $FS/probability || fail "failslab probability"
    echo "start 0x$1 end 0x$2 times $FAIL_TIMES" > "$W/failslab"
    say "failslab on: $FAIL_SYMBOL [0x$1, 0x$2)"
    # (every slab allocation now walks its stack to compare it with the range: the guest slows down)
}
failslab_off() {
    [ -n "${FAIL_SYMBOL:-}" ] || return 0
    echo 0 > $FS/probability
    echo "remaining $(cat $FS/times)" >> "$W/failslab"
}

# --- fail_make_request on the cache disk (CACHE_WRITE_FAIL=completion or submission) ------------------------
# The cache write of each try's writethrough write fails (block/blk-core.c:786, should_fail_bio, on ubdb).
#   completion: bcache's cache device is dm-linear over ubdb, so the failure reaches bcache's endio after
#     bch_data_insert_start has returned, as a device error does: bch_data_insert_error turns the write's keys
#     into invalidations (drivers/md/bcache/request.c:174-179, :139-166) while the backing write is held by
#     dm-delay - the writethrough fallback. No stack filter can name the insert here (dm-linear's bio to the
#     disk is submitted from the writer's bio list, after the insert returned).
#   submission: ubdb is the cache device and the stack filter names bch_data_insert_start: the endio runs
#     inside the submission, before that function's own continue_at(..., bch_data_insert_keys, ...) (:252),
#     which replaces the error path the endio chose.
# Either way the task filter confines the failures to the tries' writing processes (each marks itself in
# /proc/self/make-it-fail, and dm submits the disk's bio in the writer's own context, draining its bio list):
# the allocator's priority writes and the workqueues' journal and btree writes go through (a failed priority
# write disables the cache set). `times` is the wave's writes.
FMR=/sys/kernel/debug/fail_make_request
fmr_setup() {
    [ -n "${CACHE_WRITE_FAIL:-}" ] || return 0
    [ -d $FMR ] || fail "--cache-write-fail needs fail_make_request in debugfs (a debug build)"
    if [ "$CACHE_WRITE_FAIL" = submission ]; then
        grep -q "^0*${FMR_START#0x} [tT] bch_data_insert_start\$" /proc/kallsyms ||
            fail "/proc/kallsyms does not have bch_data_insert_start at $FMR_START"
        echo "0x${FMR_START#0x}" > $FMR/require-start || fail "fail_make_request require-start"
        echo "0x${FMR_END#0x}" > $FMR/require-end || fail "fail_make_request require-end"
        echo 32 > $FMR/stacktrace-depth
    fi
    # a cache set that takes an error per try must not give up at bcache's default limit of 8
    echo 1000000 > "$CSET/io_error_limit" || fail "io_error_limit"
    echo Y > $FMR/task-filter || fail "fail_make_request task-filter"
    echo 1 > $FMR/verbose
    echo 1 > $FMR/interval
    echo 0 > $FMR/times
    echo 100 > $FMR/probability || fail "fail_make_request probability"
    echo 1 > /sys/block/ubdb/make-it-fail || fail "make-it-fail on the cache disk"
    echo "when $CACHE_WRITE_FAIL cache $CACHE_DEV" > "$W/cache_write_fail"
    say "fail_make_request on ubdb ($CACHE_WRITE_FAIL), cache device $CACHE_DEV"
}
fmr_arm() {      # fmr_arm N: the next N writes of marked processes to the cache disk fail
    [ -n "${CACHE_WRITE_FAIL:-}" ] || return 0
    echo "$1" > $FMR/times
    echo "armed $1" >> "$W/cache_write_fail"
}
fmr_disarm() {   # what was left of the wave's failures (0: every one was used)
    [ -n "${CACHE_WRITE_FAIL:-}" ] || return 0
    echo "left $(cat $FMR/times)" >> "$W/cache_write_fail"
    echo 0 > $FMR/times
}
fmr_off() {
    [ -n "${CACHE_WRITE_FAIL:-}" ] || return 0
    echo 0 > $FMR/probability
    echo 0 > /sys/block/ubdb/make-it-fail
}

# --- the v1 reproducer, one try: a bypass write held by dm-delay, a read miss of the same block meanwhile --
try_one() {
    i=$1; b=$2
    if [ -n "${CACHE_WRITE_FAIL:-}" ]; then
        (echo 1 > /proc/self/make-it-fail && wr /dev/bcache0 "$b" "$b" 1) &
    else
        wr /dev/bcache0 "$b" "$b" 1 &
    fi
    wp=$!
    sleep "$READ_AT_S"
    r1=$(rd /dev/bcache0 "$b")
    wait $wp
    wrc=$?
    r2=$(rd /dev/bcache0 "$b")
    r3=$(rd /dev/dm-0 $((b + DATA_OFFSET_BLOCKS)) "$b")
    echo "$i $b $r1 $r2 $r3 $wrc" > "$W/try.$i"
}

race() {
    failslab_on
    fmr_setup
    i=1
    while [ $i -le "$TRIES" ]; do
        wave_end=$((i + WAVE - 1))
        [ $wave_end -gt "$TRIES" ] && wave_end=$TRIES
        say "tries $i-$wave_end of $TRIES"
        fmr_arm $((wave_end - i + 1))
        j=$i
        while [ $j -le $wave_end ]; do
            try_one $j $((BASE_BLOCK + j * STRIDE)) &
            j=$((j + 1))
        done
        wait
        fmr_disarm
        i=$((wave_end + 1))
    done
    fmr_off
    failslab_off
    # balance at quiescence: a block never written, in the chunk of try 1's block, read through bcache0 (a
    # miss, which caches it), then overwritten behind bcache's back: a re-read returns the old version iff
    # the miss was cached
    bb=$((BASE_BLOCK + STRIDE + 1))
    say "balance check on block $bb"
    f1=$(rd /dev/bcache0 $bb)
    sleep 0.5
    wr /dev/ubda $((bb + DATA_OFFSET_BLOCKS)) "$bb" 7
    f2=$(rd /dev/dm-0 $((bb + DATA_OFFSET_BLOCKS)) "$bb")
    f3=$(rd /dev/bcache0 $bb)
    echo "$bb $f1 $f2 $f3" > "$W/balance"
}

# --- stress: writers of versioned blocks and readers checking them, through bcache0 -----------------------
stress_writer() {   # writer k owns blocks BASE+k*STRIDE .. +STRESS_BLOCKS-1; the backing device has each
    k=$1; v=1; n=0
    end=$(($(date +%s) + STRESS_SECONDS))
    while [ "$(date +%s)" -lt $end ]; do
        off=0
        while [ $off -lt "$STRESS_BLOCKS" ]; do
            b=$((BASE_BLOCK + k * STRIDE + off))
            wr /dev/bcache0 $b $b $v || echo "write-error $b $v" >> "$W/stress.w$k"
            n=$((n + 1))
            off=$((off + 1))
        done
        echo "$v" > "$W/stress.v$k"
        v=$((v + 1))
    done
    echo "writes $n last $((v - 1))" >> "$W/stress.w$k"
}
stress_reader() {   # reads every writer's blocks; a read older than the version known complete is stale
    r=$1; n=0; stale=0
    end=$(($(date +%s) + STRESS_SECONDS))
    while [ "$(date +%s)" -lt $end ]; do
        k=0
        while [ $k -lt "$WRITERS" ]; do
            done_v=$(cat "$W/stress.v$k" 2>/dev/null || echo 0)
            off=0
            while [ $off -lt "$STRESS_BLOCKS" ]; do
                b=$((BASE_BLOCK + k * STRIDE + off))
                got=$(rd /dev/bcache0 $b)
                n=$((n + 1))
                if [ "$got" = "?" ] || [ "$got" -lt "$done_v" ]; then
                    stale=$((stale + 1))
                    echo "stale $b got $got complete $done_v" >> "$W/stress.r$r"
                fi
                off=$((off + 1))
            done
            k=$((k + 1))
        done
    done
    echo "reads $n stale $stale" >> "$W/stress.r$r"
}
stress() {
    k=0
    while [ $k -lt "$WRITERS" ]; do echo 0 > "$W/stress.v$k"; k=$((k + 1)); done
    say "stress: $WRITERS writers, $READERS readers, $STRESS_SECONDS s"
    k=0
    while [ $k -lt "$WRITERS" ]; do stress_writer $k & k=$((k + 1)); done
    r=0
    while [ $r -lt "$READERS" ]; do stress_reader $r & r=$((r + 1)); done
    wait
    # at quiescence: every block through bcache0 against the backing device
    k=0
    while [ $k -lt "$WRITERS" ]; do
        off=0
        while [ $off -lt "$STRESS_BLOCKS" ]; do
            b=$((BASE_BLOCK + k * STRIDE + off))
            echo "$b $(rd /dev/bcache0 $b) $(rd /dev/dm-0 $((b + DATA_OFFSET_BLOCKS)) "$b")" >> "$W/stress.final"
            off=$((off + 1))
        done
        k=$((k + 1))
    done
}

case "$MODE" in
    race) race ;;
    stress) stress ;;
    *) fail "unknown MODE $MODE" ;;
esac

# bcache moves its counters into stats_total on a timer armed at registration that fires every 300/22 s
# (13.6 s, accounting_delay in drivers/md/bcache/stats.c), late when the guest loses ticks under load: wait
# until stats_total changes (the first firing from now on, which takes in everything above), at most 18 s
# (WAIT_COUNTERS=0, as kernel compare runs it: read them as they are, without the wait)
stats() { cat /sys/block/bcache0/bcache/stats_total/* 2>/dev/null | tr '\n' ' '; }
before=$(stats)
n=0
while [ "${WAIT_COUNTERS:-1}" != 0 ] && [ "$(stats)" = "$before" ] && [ $n -lt 90 ]; do
    sleep 0.2
    n=$((n + 1))
done
for f in /sys/block/bcache0/bcache/stats_total/*; do
    [ -f "$f" ] && echo "${f##*/} $(cat "$f")"
done > "$W/counters"

# --- teardown: stop the device, unregister the cache set, remove dm-delay ----------------------------------
# a teardown that fails is a finding on the kernel (teardown_error), not a setup error
teardown_fail() { say "TEARDOWN FAILED: $*"; echo "$*" > "$W/teardown_error"; finish teardown-failed; }
say "teardown"
echo 1 > /sys/block/bcache0/bcache/stop || teardown_fail "stop bcache0: the write to bcache/stop failed"
wait_for ! -e /sys/block/bcache0 || teardown_fail "bcache0 still there 10 s after stop"
echo 1 > "$CSET/unregister" || teardown_fail "unregister the cache set: the write to unregister failed"
wait_for ! -e "$CSET" || teardown_fail "the cache set still registered 10 s after unregister"
dmsetup remove --noudevsync slow || teardown_fail "dmsetup remove slow failed (still open?)"
if [ "$CACHE_DEV" = /dev/dm-1 ]; then
    dmsetup remove --noudevsync cachelin || teardown_fail "dmsetup remove cachelin failed (still open?)"
fi
echo ok > "$W/teardown"
finish ok
