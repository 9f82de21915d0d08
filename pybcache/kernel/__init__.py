"""The real bcache driver as the lab's judge: Linux 6.12 under User-Mode Linux (docs/kernel.md).

* :mod:`.build`: Debian's source tarball unpacked once into the cache, ``tinyconfig`` plus the lab's
  fragments (csrc/kernel/*.config, every option checked), patches synced into a hard-linked work tree so that
  only touched files get a new mtime, and the out-of-tree ``make ARCH=um`` (:func:`.build.build_kernel`);
* :mod:`.guest`: booting the guest confined (every mount read-only but the run's work dir), bounded in time
  (its whole session killed at the bound), with the ptrace wrapper where the host needs it; the kernel log
  parsed into reports (:func:`.guest.parse_reports`);
* :mod:`.race`: the v1 reproducer (a bypass write held by dm-delay, a read miss of the same block meanwhile),
  the balance check, bcache's counters, failslab (:func:`.race.run_race`);
* :mod:`.stress`: writers and readers of versioned blocks in the guest (:func:`.stress.run_stress`);
* :mod:`.generate`: patches generated at build time from our Coccinelle semantic patches (``v1``);
* :mod:`._paths`: where csrc/kernel/ files, the cache and the tarball are.

The command is :mod:`pybcache.commands.kernel` (``pybcache kernel build|race|stress|diff``).
"""
