// SPDX-License-Identifier: GPL-2.0-only
/* Forgets PYBCACHE_PATCH on purpose. */
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <pybcache/kpatch.h>

int unused_symbol(void) { return 0; }
