#!/bin/sh
# SPDX-License-Identifier: MIT
# confine.sh WORK -- COMMAND...: run COMMAND (User-Mode Linux) with every mount read-only but WORK.
# pybcache/kernel/guest.py runs it under `unshare --mount --propagation private`, so none of this is seen
# outside: it remounts each mount of the private namespace read-only, checks that no writable mount of a
# real filesystem is left, bind-mounts WORK over itself read-write and mounts a tmpfs at WORK/shm for UML's
# memory file (TMPDIR). The guest, whose root is the host's / through hostfs, can then write only WORK.
set -eu
work=$1
shift
[ "$1" = "--" ] && shift
[ -d "$work" ] || { echo "confine.sh: no work dir $work" >&2; exit 97; }

# kernel pseudo filesystems that may stay writable if their remount is refused (none holds host files)
pseudo=" proc sysfs cgroup cgroup2 securityfs pstore bpf tracefs debugfs configfs fusectl mqueue hugetlbfs autofs binfmt_misc devpts efivarfs rpc_pipefs nsfs "

mountinfo_fields() {  # prints "MOUNTPOINT FSTYPE OPTIONS" per mount, mount point still octal-escaped
    awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { print $5, $(i + 1), $6; break } }' /proc/self/mountinfo
}

n=0
for mp in $(mountinfo_fields | awk '{ print $1 }'); do
    path=$(printf '%b' "$mp")
    mount -o remount,bind,ro "$path" 2>/dev/null || true
    n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "confine.sh: no mounts read from /proc/self/mountinfo" >&2; exit 97; }
bad=""
for entry in $(mountinfo_fields | awk '{ last[$1] = $2 "|" $3 } END { for (m in last) print m "|" last[m] }'); do
    path=${entry%%|*}
    rest=${entry#*|}
    fstype=${rest%%|*}
    opts=${rest#*|}
    case ",$opts," in
        *,ro,*) ;;
        *) case "$pseudo" in *" $fstype "*) ;; *) bad="$bad $path($fstype)" ;; esac ;;
    esac
done
if [ -n "$bad" ]; then
    echo "confine.sh: these mounts stay writable, refusing to boot the guest:$bad" >&2
    exit 97
fi
# and the proof: neither / nor the work dir's parent takes a new file
for dir in / "$(dirname "$work")"; do
    probe="$dir/.pybcache-confine-probe-$$"
    if ( : > "$probe" ) 2>/dev/null; then
        rm -f "$probe"
        echo "confine.sh: $dir is still writable, refusing to boot the guest" >&2
        exit 97
    fi
done
mount --bind "$work" "$work"
# a bind mount inherits the read-only flag of the mount it was taken from: make this one writable
mount -o remount,bind,rw "$work"
mkdir -p "$work/shm"
mount -t tmpfs -o mode=0700 pybcache-uml "$work/shm"
export TMPDIR="$work/shm"
if [ -n "${PYB_LD_PRELOAD:-}" ]; then
    export LD_PRELOAD="$PYB_LD_PRELOAD"
fi
exec "$@"
