"""The cached-device model served as a block device over NBD (through nbdkit), for unmodified clients:
:mod:`.server` (``pybcache serve``; the C plugin ``csrc/nbdkit/pyb_nbdkit.c``, or :mod:`.nbdkit_plugin` in
nbdkit's Python) and :mod:`.fio` (``pybcache fio --engine nbd``: real fio against each variant)."""
