# Top-level developer targets; `make` alone prints `make help`. `make sanitize` proves the C core and the
# extensions clean under the sanitizers; docs/robustness.md says what each part runs and how long it takes.
#
#   make test             the test suite (pytest) on 2 workers (pytest-xdist, --dist loadgroup)
#   make sanitize         every part below, in order, with the runtime of each; non-zero on any report
#   make sanitize-c-asan  C test binaries of the tracker, the native drivers and the cached-device model,
#                         ASan+UBSan (+LSan)
#   make sanitize-c-tsan  the same binaries under ThreadSanitizer (every sync variant and policy)
#   make sanitize-leak    a long build/stress/destroy loop under LeakSanitizer, and a shorter one under
#                         valgrind memcheck: every page freed, every pool page returned, no heap leak
#   make relacy           the Relacy model of the atomic variant's lockless protocol (csrc/relacy/): its
#                         memory-order table agrees with pyb_tracker.c, the model passes, and a mutant with
#                         one weakened order fails
#   make sanitize-ordering the deliberately broken ordering (a start's increment visible only after its
#                         invalidation) compiled into the C test binary: the test must FAIL with it
#   make sanitize-python  the extensions built with ASan+UBSan into build/sanitize/py (never in place:
#                         other builds are left alone) and the tests marked `native and not e2e` run against them
#   make mutate           mutation testing (mutmut 3) of the pure-Python modules with their fast tests, in
#                         build/mutate; MODULES="pybcache/x.py ..." picks the modules, MUTATE_JOBS the workers.
#                         For developers (not in .ci/run: too slow for 2 cores); docs/robustness.md.
#
# The C test binaries are built by csrc/Makefile, the one C Makefile (its sources from csrc/sources.mk).
# Everything is built under build/sanitize/. Knobs: OPS, LEAK_OPS, LEAK_ROUNDS, PYTEST_ARGS, PYMALLOC,
# SANITIZE_MARK, SANITIZE_JOBS, SANITIZE_TESTS, PYTEST_JOBS.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec
ifeq ($(origin CC),default)
CC := gcc
endif
ifeq ($(origin CXX),default)
CXX := g++
endif
PYTHON ?= python3

BUILD := build/sanitize
CSRC := csrc
include $(CSRC)/sources.mk
CORE := $(addprefix $(CSRC)/,$(PYB_CORE_SRC))
MODEL := $(addprefix $(CSRC)/,$(PYB_MODEL_SRC) $(PYB_KPATCH_SRC))
HEADERS := $(wildcard $(CSRC)/*.h $(CSRC)/tests/*.h)
SUPP := $(CURDIR)/tests/sanitizers

OPS ?= 2000
LEAK_OPS ?= 4000
LEAK_ROUNDS ?= 60
PYTEST_ARGS ?= -q

# Every report is fatal: ASan and UBSan halt at the first one, TSan too (exit 66).
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=23 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=23 \
	LSAN_OPTIONS=exitcode=23
TSAN_ENV := TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:exitcode=66
VALGRIND := valgrind -q --leak-check=full --show-leak-kinds=all --errors-for-leak-kinds=all --error-exitcode=24 \
	--fair-sched=yes

# The Python run: a non-ASan interpreter needs libasan first in the library list (LD_PRELOAD).
# detect_leaks=0 there: CPython and numpy keep interned strings, type objects and arenas alive until the
# process ends on purpose, which LeakSanitizer reports as leaks of code that is not ours; the leak check of
# our C code is sanitize-leak. allocator_may_return_null=1: tests ask for impossible trackers on purpose
# and expect MemoryError, where ASan would otherwise abort on the oversized calloc. Reports go to files
# under $(BUILD)/reports (child processes of the CLI tests included) and any file there fails the run.
# libstdc++ is preloaded too: a C++ extension of a dependency (matplotlib's ft2font) throws, and ASan's
# __cxa_throw interceptor aborts with "CHECK failed ... real___cxa_throw" unless libstdc++ was loaded first.
LIBASAN := $(shell $(CC) -print-file-name=libasan.so)
LIBSTDCXX := $(shell $(CC) -print-file-name=libstdc++.so)
PY_REPORTS := $(CURDIR)/$(BUILD)/reports
# PYMALLOC=malloc sends every Python allocation through ASan too (stricter, about 1.5x slower); the default
# keeps CPython's small-object allocator, whose arenas ASan sees as one block each.
PYMALLOC ?= pymalloc
PY_ENV := LD_PRELOAD="$(LIBASAN) $(LIBSTDCXX)" PYTHONMALLOC=$(PYMALLOC) PYTHONFAULTHANDLER=1 \
	ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:allocator_may_return_null=1:log_path=$(PY_REPORTS)/asan:suppressions=$(SUPP)/asan.supp \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$(PY_REPORTS)/ubsan:suppressions=$(SUPP)/ubsan.supp

.DEFAULT_GOAL := help
.PHONY: help test

help:
	@echo "make TARGET (PYTHON=$(PYTHON)); targets:"
	@echo "  test               the test suite: pytest -n $(PYTEST_JOBS) --dist loadgroup (pytest-xdist)"
	@echo "  sanitize           all sanitizer parts below in order, with the runtime of each"
	@echo "  sanitize-c-asan    the C test binaries (tracker, native drivers, cached-device model) under ASan+UBSan"
	@echo "  sanitize-c-tsan    the same binaries under ThreadSanitizer"
	@echo "  sanitize-leak      a long build/stress/destroy loop under LeakSanitizer, a shorter one under valgrind"
	@echo "  sanitize-ordering  the deliberately broken ordering compiled in: the C test must fail with it"
	@echo "  relacy             the Relacy model of the atomic variant's lockless protocol, and its mutant"
	@echo "  sanitize-python    the extensions built with ASan+UBSan, the tests marked '$(SANITIZE_MARK)' against them"
	@echo "  sanitize-clean     remove build/sanitize"
	@echo "  docs               write docs/figures.md, the generated figures, from one pybcache report run"
	@echo "  cli-docs           rewrite docs/cli.md from the command-line parsers"
	@echo "  mutate             mutation testing (mutmut 3) of the pure-Python modules (slow; MODULES=, MUTATE_JOBS=)"
	@echo "  mutate-results     the kill rate and survivors of the last mutate run"
	@echo "  help               this list"
	@echo "C binaries alone: make -C csrc (test, asan, tsan, bench-ops; csrc/Makefile)"

# The README's test command with the workers of CI (.ci/run): `pytest` alone runs serially (no -n in the
# pyproject's addopts, which would break `pytest -p no:xdist` and mutmut's in-process runs). loadgroup:
# tests marked @pytest.mark.xdist_group("native-threads") never run two at a time (pyproject.toml).
PYTEST_JOBS ?= 2
test:
	$(PYTHON) -m pytest -n $(PYTEST_JOBS) --dist loadgroup

TIMES := $(BUILD)/times.txt
# $(call timed,label,commands): run commands, append "label seconds" to $(TIMES), print it.
timed = t0=$$EPOCHREALTIME; $(2); t1=$$EPOCHREALTIME; \
	awk -v a=$$t0 -v b=$$t1 -v l="$(1)" 'BEGIN { printf "%-18s %6.1f s\n", l, b - a }' | tee -a $(TIMES)

.PHONY: relacy sanitize sanitize-c-asan sanitize-c-tsan sanitize-leak sanitize-ordering sanitize-python sanitize-clean

sanitize:
	@mkdir -p $(BUILD) && rm -f $(TIMES)
	@$(call timed,c-asan+ubsan,$(MAKE) --no-print-directory sanitize-c-asan)
	@$(call timed,c-tsan,$(MAKE) --no-print-directory sanitize-c-tsan)
	@$(call timed,leak,$(MAKE) --no-print-directory sanitize-leak)
	@$(call timed,ordering,$(MAKE) --no-print-directory sanitize-ordering)
	@$(call timed,relacy,$(MAKE) --no-print-directory relacy)
	@$(call timed,python-asan+ubsan,$(MAKE) --no-print-directory sanitize-python)
	@echo "make sanitize: clean; runtime of each part:" && cat $(TIMES)

# ---- C binaries ---------------------------------------------------------------------------------------
# Built by csrc/Makefile (the one C Makefile: pattern rules per flavour, the sources from csrc/sources.mk)
# into $(BUILD)/c; make recurses into it on every use, so a changed C file rebuilds only what depends on it.
CBIN := $(CURDIR)/$(BUILD)/c
CMAKE := $(MAKE) --no-print-directory -C $(CSRC) BUILD=$(CBIN) CC="$(CC)" CXX="$(CXX)"

sanitize-c-asan:
	$(CMAKE) $(CBIN)/test_tracker_asan $(CBIN)/test_drivers_asan $(CBIN)/test_cachedev_asan
	$(ASAN_ENV) $(CBIN)/test_tracker_asan 20000 3
	$(ASAN_ENV) $(CBIN)/test_drivers_asan 4000
	$(ASAN_ENV) $(CBIN)/test_cachedev_asan $(OPS) 0 unit,explore,ordering,race,fio

# The explorer is single-threaded (nothing for TSan there, and 70 s under it): TSan runs the threaded parts.
sanitize-c-tsan:
	$(CMAKE) $(CBIN)/test_tracker_tsan $(CBIN)/test_drivers_tsan $(CBIN)/test_cachedev_tsan
	$(TSAN_ENV) $(CBIN)/test_tracker_tsan 5000 3
	$(TSAN_ENV) $(CBIN)/test_drivers_tsan 2000
	$(TSAN_ENV) $(CBIN)/test_cachedev_tsan $(OPS) 0 unit,ordering,race,fio

sanitize-leak:
	$(CMAKE) $(CBIN)/test_cachedev_asan $(CBIN)/test_cachedev_plain $(CBIN)/test_tracker_plain
	$(ASAN_ENV) $(CBIN)/test_cachedev_asan $(LEAK_OPS) $(LEAK_ROUNDS) leak
	$(VALGRIND) $(CBIN)/test_cachedev_plain 1000 3 unit,ordering,leak
	$(VALGRIND) $(CBIN)/test_tracker_plain 1000 2

# The same test binary with the broken ordering compiled in must fail its checks (exit 1, not a crash).
sanitize-ordering:
	@$(CMAKE) $(CBIN)/test_cachedev_broken
	@set +e; $(CBIN)/test_cachedev_broken $(OPS) 0 explore,fio > $(BUILD)/broken.log 2>&1; rc=$$?; set -e; \
	grep -E '^test_cachedev: (explore|fio) ' $(BUILD)/broken.log; \
	if [ $$rc -ne 1 ]; then echo "sanitize-ordering: the broken ordering went unnoticed (exit $$rc)"; exit 1; fi; \
	echo "sanitize-ordering: the broken ordering is caught ($$(grep -c 'check failed' $(BUILD)/broken.log) failed checks, exit 1)"

# ---- the Relacy model (Debian relacy-dev) --------------------------------------------------------------------

RELACY_ITER ?= 200000

# The model must pass, and the mutant (one weakened order) must be caught: exit 1, not a crash.
relacy:
	$(CMAKE) $(CBIN)/relacy/model $(CBIN)/relacy/mutant
	python3 $(CSRC)/relacy/check_orders.py
	$(CBIN)/relacy/model $(RELACY_ITER)
	@set +e; $(CBIN)/relacy/mutant $(RELACY_ITER); rc=$$?; set -e; \
	if [ $$rc -ne 1 ]; then echo "relacy: the mutant went unnoticed (exit $$rc)"; exit 1; fi; \
	echo "relacy: the mutant (announcement weakened to release) is caught"

# ---- the extensions under ASan+UBSan and the Python test suite ---------------------------------------------

$(BUILD)/py/.built: setup.py $(CORE) $(MODEL) $(HEADERS) $(shell find pybcache -name '*.pyx' -o -name '*.pxd' -o -name '*.py') \
		$(shell find $(CSRC)/kpatch $(CSRC)/nbdkit -name '*.[ch]') \
		$(wildcard examples/patches/*.c)
	$(PYTHON) -c "import Cython, setuptools as s; assert int(s.__version__.split('.')[0]) >= 77" 2>/dev/null || \
		$(PYTHON) -m pip install -q "Cython>=3.1,<4" "setuptools>=77,<81"
	rm -rf $(BUILD)/py $(BUILD)/py-tmp && mkdir -p $(BUILD)/py
	cp -r pybcache $(BUILD)/py/pybcache
	# drop build products: the C that Cython generated (pybcache/_*.c), extensions and caches
	find $(BUILD)/py/pybcache \( -name '*.so' -o -name '_*.c' -o -name __pycache__ \) -prune -exec rm -rf {} +
	# the C compiled on the user's machine and the example patches, placed as a wheel has them (setup.py's
	# package_dir: pybcache/csrc, pybcache/examples)
	cp -r $(CSRC) $(BUILD)/py/pybcache/csrc
	mkdir -p $(BUILD)/py/pybcache/examples && cp -r examples/patches $(BUILD)/py/pybcache/examples/
	# (no --parallel: the extensions compile the same core sources into one build-temp, and building them
	# in parallel races on those object files - an extension then links a truncated one)
	PYBCACHE_SANITIZE=address,undefined PYBCACHE_DEBUG=1 PYBCACHE_WERROR=1 CFLAGS="-fno-sanitize-recover=all" \
		$(PYTHON) setup.py -q build_ext --force --build-lib $(BUILD)/py --build-temp $(BUILD)/py-tmp
	touch $@

# Which tests run against the ASan build: those marked `native` (they reach the C extensions or the C code)
# and not `e2e` (a compile of a patch or plugin, a child process, a server, real fio/nbdkit/Dask, a whole
# report: their C is either not ours or reached through a fresh process that the plain suite runs anyway);
# pyproject.toml defines the markers. The sanitizers instrument only the extensions, so a test that never
# reaches them would run the same code as in the plain suite.
SANITIZE_MARK ?= native and not e2e
# 2 xdist workers (the C suites before it are done; -n 0 runs in one process); loadgroup keeps the tests of
# @pytest.mark.xdist_group("native-threads") on one worker, one at a time.
SANITIZE_JOBS ?= 2
# What pytest is given (default the whole suite; a list of test files or folders narrows the run).
SANITIZE_TESTS ?= $(CURDIR)/tests
# PYTHONPATH: the CLI tests run the pybcache console script from a scratch directory; it must import the ASan
# build too, not the in-place one.
PY_PYTEST = cd $(CURDIR)/$(BUILD)/py && PYTHONPATH=$(CURDIR)/$(BUILD)/py $(PY_ENV) $(PYTHON) -m pytest -c $(CURDIR)/pyproject.toml \
	--rootdir $(CURDIR) -p no:cacheprovider
PY_XDIST = $(if $(filter-out 0,$(SANITIZE_JOBS)),-n $(SANITIZE_JOBS) --dist loadgroup)

sanitize-python: $(BUILD)/py/.built
	rm -rf $(PY_REPORTS) && mkdir -p $(PY_REPORTS)
	cd $(BUILD)/py && $(PY_ENV) $(PYTHON) -c "import pybcache.bcache._tracker as t, pybcache.bcache._cachedev as c, os; \
		assert all(os.path.realpath(m.__file__).startswith(os.getcwd()) for m in (t, c)), 'not the ASan build'; \
		print('sanitize-python: ASan+UBSan extensions', os.path.relpath(t.__file__), os.path.relpath(c.__file__))"
	# exit status 5 is pytest's "no test ran": never a pass here
	set +e; $(PY_PYTEST) $(PY_XDIST) -m "$(SANITIZE_MARK)" $(PYTEST_ARGS) $(SANITIZE_TESTS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "sanitize-python: FAILED: no test ran (-m '$(SANITIZE_MARK)' $(PYTEST_ARGS))"; fi; \
	set -e; reports=$$(ls $(PY_REPORTS)); \
	if [ -n "$$reports" ]; then cat $(PY_REPORTS)/*; echo "sanitize-python: sanitizer reports: $$reports"; exit 1; fi; \
	exit $$rc

sanitize-clean:
	rm -rf $(BUILD)

# ---- docs ---------------------------------------------------------------------------------------------------
# `make docs`: ONE `pybcache report` run (nice'd, into build/docs-report) writes docs/figures.md, the only
# generated Markdown file (pybcache/report/docs.py holds the generators; README and the guides link to it), and
# its scaling plot (docs/img/report-scaling.png) from the same run: a refresh changes those two files only.
# `make docs REPORT=DIR` writes them from an existing run instead; QUICK=1 runs --quick.
# `make cli-docs` (also run by `make docs`) rewrites docs/cli.md, the command-line reference, from the parsers
# (pybcache/commands/_reference.py; tests/docs/test_cli_reference.py fails when it is not current).
REPORT ?=
QUICK ?=
DOCS_REPORT := build/docs-report

.PHONY: docs cli-docs
docs: cli-docs
	@if [ -z "$(REPORT)" ]; then \
		t0=$$EPOCHREALTIME; nice -n 10 $(PYTHON) -m pybcache report --out $(DOCS_REPORT) $(if $(QUICK),--quick); \
		awk -v a=$$t0 -v b=$$EPOCHREALTIME 'BEGIN { printf "make docs: pybcache report took %.0f s\n", b - a }'; \
	fi
	$(PYTHON) -m pybcache.report.docs --report $(if $(REPORT),$(REPORT),$(DOCS_REPORT))
	cp $(if $(REPORT),$(REPORT),$(DOCS_REPORT))/scaling.png docs/img/report-scaling.png

cli-docs:
	$(PYTHON) -m pybcache.commands._reference docs/cli.md

# ---- mutation testing ------------------------------------------------------------------------------------

MUTATE_DIR := build/mutate
MODULES ?= pybcache/bcache/reference.py pybcache/commands/_util.py pybcache/validate.py pybcache/units.py \
	pybcache/dist/sweep.py pybcache/bcache/experiments/memory.py pybcache/report/nbd.py pybcache/bcache/cachedev.py \
	pybcache/report/__init__.py pybcache/report/_common.py pybcache/report/memory.py pybcache/report/bench.py
MUTATE_JOBS ?= 2

.PHONY: mutate mutate-results

# The extensions are built in place first: tools/mutate/mutate.py copies pybcache/ with its .so files into
# $(MUTATE_DIR), and mutmut copies that into $(MUTATE_DIR)/mutants, which it puts first on sys.path - so the
# mutated package imports its compiled extensions from its own copy. PYTHONPATH points the tests' child
# processes (the installed console script, python -c) at the same copy, so the CLI runs the mutant too;
# TMPDIR gives them, started from the temporary directory, a mutmut configuration to read (tools/mutate/mutate.py).
# HYPOTHESIS_PROFILE=ci: the same examples under every mutant.
mutate:
	$(PYTHON) -c "import mutmut" 2>/dev/null || $(PYTHON) -m pip install -q "mutmut>=3.3,<4"
	$(PYTHON) setup.py -q build_ext --inplace
	globs=$$($(PYTHON) tools/mutate/mutate.py prepare $(MUTATE_DIR) "$(MODULES)"); \
	cd $(MUTATE_DIR) && HYPOTHESIS_PROFILE=ci PYTHONPATH=$(CURDIR)/$(MUTATE_DIR)/mutants TMPDIR=$(CURDIR)/$(MUTATE_DIR)/tmp \
		$(PYTHON) -m mutmut run --max-children $(MUTATE_JOBS) $$globs > mutmut-run.log 2>&1 || \
		{ tail -30 mutmut-run.log; exit 1; }
	$(MAKE) --no-print-directory mutate-results

# The kill rate per module and every surviving mutant of the last run (`cd build/mutate && mutmut show NAME`
# prints one's diff).
mutate-results:
	cd $(MUTATE_DIR) && $(PYTHON) $(CURDIR)/tools/mutate/mutate.py summary .
