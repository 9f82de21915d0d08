"""Sources of the nbdkit plugins that serve the cached-device model (compiled or loaded by
:mod:`pybcache.serve`, never imported for their own sake). A wheel also carries the model's C sources
under ``csrc/`` here, so that the C plugin can be built after ``pip install`` with only a C compiler and
Debian's ``nbdkit-plugin-dev``."""
