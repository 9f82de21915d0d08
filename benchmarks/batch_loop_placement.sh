#!/usr/bin/env bash
# The batch loops against their floor, linked two ways: benchmarks/batch_loop_c.c built as an executable
# (as its header shows) and the same file built as a shared library that a small driver dlopen()s, as the
# Python extension is loaded. Same sources, same flags (-O2), same machine, runs interleaved: what changes
# is only where the code lands. Prints each run's line (pair ns, floor ns, median ratio of 9 rounds).
#
#   bash benchmarks/batch_loop_placement.sh [RUNS] [DEVICE_BYTES]     # defaults 3, 10 GiB
#
# docs/benchmarks.md ("The floor depends on where it is linked") quotes its output.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
device=${2:-10737418240}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
src=(benchmarks/batch_loop_c.c csrc/pyb_tracker.c csrc/pyb_atomic.c csrc/pyb_fault.c csrc/pyb_floor.c)
cc -std=c11 -D_GNU_SOURCE -O2 -pthread -Icsrc -o "$out/exe" "${src[@]}"
# The library: the same file with its main renamed, called through dlopen/dlsym.
cc -std=c11 -D_GNU_SOURCE -O2 -pthread -fPIC -shared -Icsrc -Dmain=batch_loop_main -o "$out/lib.so" "${src[@]}"
cat >"$out/driver.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    int (*f)(int, char **) = (int (*)(int, char **))dlsym(h, "batch_loop_main");
    return f ? f(argc - 1, argv + 1) : 2;
}
C
cc -O2 -o "$out/driver" "$out/driver.c" -ldl
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= runs; r++)); do
    for sync in 0 1 2; do
        name=$(case $sync in 0) echo global;; 1) echo page;; 2) echo atomic;; esac)
        printf 'run %d %-6s executable: %s\n' "$r" "$name" "$("$out/exe" "$device" "$sync")"
        printf 'run %d %-6s library:    %s\n' "$r" "$name" "$("$out/driver" "$out/lib.so" "$device" "$sync")"
    done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
