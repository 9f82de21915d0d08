/* linux/wait.h - forwards to the pybcache kernel-API shim, so pasted kernel code keeps its includes. */
#ifndef PYBCACHE_LINUX_WAIT_H
#define PYBCACHE_LINUX_WAIT_H
#include <pybcache/kpatch.h>
#endif
