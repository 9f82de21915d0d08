/* SPDX-License-Identifier: MIT */
/*
 * LD_PRELOAD wrapper of ptrace() for User-Mode Linux on hosts with a large XSAVE area (AMX).
 *
 * UML sizes the FPU state it moves with PTRACE_GETREGSET/SETREGSET NT_X86_XSTATE at build time
 * (2,696 bytes on x86_64). A host kernel whose XSAVE area is larger (11,008 bytes with AMX tiles)
 * refuses a SETREGSET that does not carry the whole area (EFAULT), and UML dies at its first process:
 * "userspace - ptrace set fp regs failed, errno = 14". This wrapper turns such a short SETREGSET into a
 * full one: it reads the tracee's whole area, lays UML's bytes over its start and writes the whole area
 * back. Every other request goes to the C library's ptrace() untouched.
 *
 * pybcache compiles this file into its kernel cache and preloads it only on hosts that need it
 * (pybcache/kernel/guest.py: the host's XSAVE size from CPUID leaf 0xD against UML's).
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifndef NT_X86_XSTATE
#define NT_X86_XSTATE 0x202
#endif

typedef long (*ptrace_fn)(enum __ptrace_request, ...);

/* UML's kernel threads share one host thread; 64 KiB covers any XSAVE area of today's CPUs. */
static __thread unsigned char full_area[64 * 1024] __attribute__((aligned(64)));

/* The XSAVE area size of the features the host kernel enabled (XCR0): CPUID.(EAX=0xD, ECX=0):EBX.
 * pybcache calls it through ctypes to decide whether the wrapper is needed. */
unsigned int pyb_uml_host_xstate_size(void)
{
	unsigned int eax, ebx, ecx, edx;

	if (!__get_cpuid_count(0xd, 0, &eax, &ebx, &ecx, &edx))
		return 0;
	return ebx;
}

long ptrace(enum __ptrace_request request, ...)
{
	static ptrace_fn real;
	va_list ap;
	pid_t pid;
	void *addr, *data;

	va_start(ap, request);
	pid = va_arg(ap, pid_t);
	addr = va_arg(ap, void *);
	data = va_arg(ap, void *);
	va_end(ap);
	if (!real)
		real = (ptrace_fn)dlsym(RTLD_NEXT, "ptrace");
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	if (request == PTRACE_SETREGSET && (unsigned long)addr == NT_X86_XSTATE && data) {
		struct iovec *short_iov = data;
		struct iovec full = { full_area, sizeof(full_area) };

		if (real(PTRACE_GETREGSET, pid, addr, &full) == 0 && full.iov_len > short_iov->iov_len) {
			memcpy(full_area, short_iov->iov_base, short_iov->iov_len);
			return real(PTRACE_SETREGSET, pid, addr, &full);
		}
	}
	return real(request, pid, addr, data);
}
