"""Issue 25 part 3: write_end in every context the kernel runs cached_dev_write_complete in, and lockdep's
rules, each broken by exactly one purpose-built patch (tests/data/contexts/) and reported by
``check-patch --check context`` in lockdep's (or the scheduler's) own words; the issue's two wrong passes now
fail and its two false failures now pass. Part 7: which allocations fault injection fails."""
from __future__ import annotations

import threading

import pytest

from helpers.clirun import run_pybcache
from helpers.kpatch_util import BAD, EXAMPLES

import pybcache
from pybcache.bcache.cachedev import explore
from pybcache.bcache.kpatch.check.runner import check_patch

pytestmark = [pytest.mark.native, pytest.mark.e2e]

CTX = BAD / "contexts"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PYBCACHE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kpatch-cache"))


def _context(name):
    (c,) = check_patch(CTX / f"{name}.c", checks=["context"]).checks
    return c


def _text(c):
    return c.detail + "\n" + "\n".join(c.counterexample or [])


#: patch -> (report kind in the figure, the kernel's words that must appear)
BROKEN = {
    # the issue's first wrong pass: plain spin_lock in the end, spin_lock_irqsave in the start
    "ctx_plain_lock_in_end": ("inconsistent_lock_state", "inconsistent {IN-HARDIRQ-W} -> {HARDIRQ-ON-W} usage"),
    # the issue's second wrong pass: spin_lock_irq inside the end
    "ctx_lock_irq_in_end": ("irqs_enabled_in_irq", "irq handler enabled interrupts"),
    "ctx_softirq_usage": ("inconsistent_lock_state", "inconsistent {SOFTIRQ-ON-W} -> {IN-SOFTIRQ-W} usage"),
    "ctx_abba": ("circular_locking", "possible circular locking dependency detected"),
    "ctx_irq_enable_with_safe_lock": ("inconsistent_lock_state",
                                      "inconsistent {HARDIRQ-ON-W} -> {IN-HARDIRQ-W} usage"),
    "ctx_gfp_kernel": ("gfp_io_on_submission", "allocation with GFP_KERNEL"),
    "ctx_sleep_in_wait_cond": ("blocking_in_wait_condition", "do not call blocking ops when !TASK_RUNNING"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_rule_fails_context_in_the_kernels_words(name):
    kind, words = BROKEN[name]
    c = _context(name)
    assert not c.passed
    assert kind in c.figure
    assert words in _text(c)
    # the verdict says where write_end ran, every context reached
    for where in ("in hard-irq", "in soft-irq", "on a worker", "inline on the submitter"):
        assert where in c.detail


def test_an_irq_safe_lock_ordered_before_an_irq_unsafe_one_fails_in_lockdeps_words():
    # which of lockdep's two reports comes first depends on whether the order or the irq usage is seen
    # first (a scheduling matter): both name the same bug
    c = _context("ctx_irq_safe_unsafe")
    assert not c.passed
    assert ("HARDIRQ-safe -> HARDIRQ-unsafe lock order detected" in _text(c)
            or "possible irq lock inversion dependency detected" in _text(c))
    assert "count_lock" in _text(c) and "stats_lock" in _text(c)


@pytest.mark.parametrize("name", ["ctx_trylock_in_irq", "ctx_rcu_sched_reader"])
def test_the_issues_false_failures_now_pass_context(name):
    c = _context(name)
    assert c.passed, _text(c)
    assert "0 reports" == c.figure


def test_the_rcu_sched_reader_also_passes_semantics_and_race_no_object_freed_under_it():
    # the WARN_ON in its read_bypass fires if the irqs-off reader ever saw a freed object: the shim's grace
    # periods wait for interrupts-disabled regions
    r = check_patch(CTX / "ctx_rcu_sched_reader.c", checks=["semantics", "race", "balance"], seconds=0.5)
    assert r.passed, [(c.name, c.detail) for c in r.checks]


def test_explore_reaches_every_context_and_fails_the_plain_lock_in_the_end():
    patch = pybcache.load_patch(CTX / "ctx_plain_lock_in_end.c")
    before = patch._module.end_counts()
    res = explore(sync=patch, writes=2, reads=1)
    ran = {c: n - before[c] for c, n in patch._module.end_counts().items()}
    assert all(n > 0 for n in ran.values()), ran
    assert res["report_schedules"] > 0
    (c,) = check_patch(CTX / "ctx_plain_lock_in_end.c", checks=["explore"]).checks
    assert not c.passed and c.figure == "kernel report"


def test_the_examples_pass_explore_saying_where_write_end_ran():
    (c,) = check_patch(EXAMPLES / "v3_proposal.c", checks=["explore"]).checks
    assert c.passed, c.detail
    for where in ("in hard-irq", "in soft-irq", "on a worker", "inline on the submitter"):
        assert where in c.detail


# -- the runtime's rules, one call at a time ------------------------------------------------------------

def _kinds(t):
    return sorted({r["kind"] for r in t.kernel_reports()})


def _fresh(name, tmp_path):
    """The patch as a module of its own: lockdep's state (lock classes, what was reported) lives in the
    module, once per process like once per boot, so a test that expects a first report loads a copy."""
    copy = tmp_path / f"{name}.c"
    copy.write_bytes((CTX / f"{name}.c").read_bytes())
    return pybcache.load_patch(copy)


def test_end_runs_in_the_context_asked_and_counts_it(tmp_path):
    t = _fresh("ctx_plain_lock_in_end", tmp_path).tracker(1 << 30)
    for where in ("hardirq", "softirq", "worker", "inline"):
        t.start(0, 4096)
        t.end(0, 4096, context=where)
    assert t.stats()["ends_in"] == {"hardirq": 1, "softirq": 1, "worker": 1, "inline": 1}
    (r, r2) = sorted(t.kernel_reports(), key=lambda r: r["message"])
    assert r["end_context"] == "softirq" and "{IN-HARDIRQ-W} -> {HARDIRQ-ON-W}" in r["message"]
    assert "[write_end in soft-irq]" in r["message"]
    assert "{IN-SOFTIRQ-W} -> {SOFTIRQ-ON-W}" in r2["message"]
    with pytest.raises(ValueError, match="context must be one of"):
        t.end(0, 4096, context="nmi")


def test_a_tracker_rotates_its_ends_over_the_contexts_it_was_given():
    t = pybcache.load_patch(CTX / "ctx_trylock_in_irq.c").tracker(1 << 30, end_contexts=("softirq", "worker"))
    assert t.end_contexts == ("softirq", "worker")
    for _ in range(10):
        t.start(0, 4096)
        t.end(0, 4096)
    got = t.stats()["ends_in"]
    assert got["hardirq"] == got["inline"] == 0 and got["softirq"] + got["worker"] == 10
    assert abs(got["softirq"] - got["worker"]) <= 1
    assert _kinds(t) == []
    with pytest.raises(ValueError, match="end_contexts"):
        pybcache.load_patch(CTX / "ctx_trylock_in_irq.c").tracker(1 << 30, end_contexts=("hardirq", "nmi"))
    with pytest.raises(ValueError, match="at least one"):
        pybcache.load_patch(CTX / "ctx_trylock_in_irq.c").tracker(1 << 30, end_contexts=())


def test_a_trylock_in_interrupt_context_is_no_lockdep_error_but_a_plain_lock_is():
    # the trylock patch takes stats_lock with spin_lock in write_start, spin_trylock in write_end
    t = pybcache.load_patch(CTX / "ctx_trylock_in_irq.c").tracker(1 << 30)
    for where in ("hardirq", "softirq", "worker"):
        t.start(0, 4096)
        t.end(0, 4096, context=where)
    assert _kinds(t) == []


def test_an_irqs_off_region_is_an_rcu_reader_a_grace_period_waits_for():
    # ctx_rcu_sched_reader: every 8th start replaces the object and kfree_rcu's the old one; read_bypass reads it
    # with interrupts disabled only (rcu_dereference_sched) and WARNs on a freed (poisoned) object
    t = pybcache.load_patch(CTX / "ctx_rcu_sched_reader.c").tracker(1 << 30)
    stop = threading.Event()
    errors = []

    def reader():
        try:
            while not stop.is_set():
                t.is_active(0, 4096)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    th = threading.Thread(target=reader)
    th.start()
    try:
        for _ in range(4000):
            t.start(0, 4096)
            t.end(0, 4096)
    finally:
        stop.set()
        th.join()
    t.rcu_barrier()
    assert not errors and _kinds(t) == []
    assert t.stats()["warnings"] == 0


def test_rcu_dereference_outside_any_reader_is_still_suspicious(tmp_path):
    src = tmp_path / "deref.c"
    src.write_text("""
#include <linux/rcupdate.h>
#include <pybcache/kpatch.h>
static int *p;
static void st(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; (void)rcu_dereference_sched(p); }
static void en(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; (void)rcu_dereference_sched(p); }
static bool rd(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "deref", .write_start = st, .write_end = en, .read_bypass = rd };
PYBCACHE_PATCH(ops);
""")
    t = pybcache.load_patch(src).tracker(1 << 20)
    t.start(0, 512)                    # process context, interrupts on: no reader
    assert _kinds(t) == ["suspicious_rcu_usage"]
    t.end(0, 512, context="hardirq")   # hard-irq: a reader
    t.end(0, 512, context="worker")    # process context again
    assert [r["count"] for r in t.kernel_reports()] == [1, 1]


def test_memalloc_noio_scope_clears_the_gfp_report(tmp_path):
    src = tmp_path / "noio.c"
    src.write_text("""
#include <linux/slab.h>
#include <linux/sched/mm.h>
#include <pybcache/kpatch.h>
static void st(struct cached_dev *dc, struct bio *bio)
{
        unsigned int flags = memalloc_noio_save();
        (void)dc; (void)bio;
        kfree(kmalloc(64, GFP_KERNEL));
        memalloc_noio_restore(flags);
}
static void en(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; kfree(kmalloc(64, GFP_KERNEL)); }
static bool rd(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "noio", .write_start = st, .write_end = en, .read_bypass = rd };
PYBCACHE_PATCH(ops);
""")
    t = pybcache.load_patch(src).tracker(1 << 20)
    t.start(0, 512)
    t.end(0, 512, context="worker")    # a work item is not the submission path
    assert _kinds(t) == []
    t.end(0, 512, context="inline")    # inline on the submitter is
    assert _kinds(t) == ["gfp_io_on_submission"]


# -- part 7: allocations the kernel can fail ------------------------------------------------------------

def test_by_default_only_allocations_the_kernel_can_fail_are_failed(tmp_path):
    src = tmp_path / "masks.c"
    src.write_text("""
#include <linux/slab.h>
#include <pybcache/kpatch.h>
static void *got[5];
static void st(struct cached_dev *dc, struct bio *bio)
{
        (void)dc; (void)bio;
        got[0] = kmalloc(4096, GFP_NOIO);
        got[1] = kmalloc(4096, GFP_KERNEL);
        got[2] = kmalloc(64, GFP_ATOMIC);
        got[3] = kmalloc(64, GFP_NOWAIT);
        got[4] = kmalloc(64 * 1024, GFP_NOIO);     /* over PAGE_ALLOC_COSTLY_ORDER */
        for (int i = 0; i < 5; i++)
                kfree(got[i]);
}
static void en(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; }
static bool rd(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "masks", .write_start = st, .write_end = en, .read_bypass = rd };
PYBCACHE_PATCH(ops);
""")
    p = pybcache.load_patch(src)
    f = pybcache.FaultInjection(probability=1.0)
    t = p.tracker(1 << 20, fault=f, fail_alloc="can-fail")
    assert t.start(0, 512) is False
    assert t.stats()["alloc_failures"] == 3 and f.injected == 3      # ATOMIC, NOWAIT, 64 KiB
    f2 = pybcache.FaultInjection(probability=1.0)
    t2 = p.tracker(1 << 20, fault=f2)                                # the API's default: all
    t2.start(0, 512)
    assert f2.injected == 5
    with pytest.raises(ValueError, match="fail_alloc"):
        p.tracker(1 << 20, fail_alloc="some")


def test_v2_fails_semantics_only_under_adversarial_injection_and_the_verdict_says_which_mode_ran():
    (c,) = check_patch(EXAMPLES / "v2_posted.c", checks=["semantics"]).checks
    assert c.passed and "only allocations the kernel can fail" in c.detail and "0 injected" in c.detail
    (c,) = check_patch(EXAMPLES / "v2_posted.c", checks=["semantics"], fail_alloc="all").checks
    assert not c.passed and c.figure == "missed bypass"


def test_cli_fail_alloc_option_and_its_header():
    r = run_pybcache("check-patch", str(EXAMPLES / "v2_posted.c"), "--check", "semantics", "--fail-alloc", "all")
    assert r.returncode == 1
    assert "allocation failures injected into every allocation but __GFP_NOFAIL (--fail-alloc all)" in r.stdout
    r = run_pybcache("check-patch", str(EXAMPLES / "v2_posted.c"), "--check", "semantics", "--json")
    assert r.returncode == 0 and '"fail_alloc": "can-fail"' in r.stdout
    r = run_pybcache("check-patch", str(EXAMPLES / "v2_posted.c"), "--fail-alloc", "some")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_an_irq_safe_to_unsafe_order_is_reported_whichever_is_seen_first(tmp_path):
    # ctx_irq_safe_unsafe: write_start takes count_lock (irqsave) then stats_lock; write_end takes count_lock in
    # interrupt context (irq-safe); read_bypass takes stats_lock with interrupts on (irq-unsafe)
    def fresh(sub):
        (tmp_path / sub).mkdir()
        return _fresh("ctx_irq_safe_unsafe", tmp_path / sub).tracker(1 << 30)

    # the order, then the irq-safe usage, then the irq-unsafe one: found when the last usage is marked
    # (lockdep's check_usage_backwards): "possible irq lock inversion dependency detected"
    t = fresh("a")
    t.start(0, 4096)
    t.end(0, 4096)
    assert t.kernel_reports() == []
    t.is_active(0, 4096)
    (r,) = t.kernel_reports()
    assert r["kind"] == "irq_lock_inversion" and "possible irq lock inversion dependency detected" in r["message"]
    assert (r["lock"], r["other_lock"]) == ("stats_lock", "count_lock")
    # the unsafe usage, the order, then the safe usage (check_usage_forwards)
    t = fresh("b")
    t.is_active(0, 4096)
    t.start(0, 4096)
    assert t.kernel_reports() == []
    t.end(0, 4096)
    (r,) = t.kernel_reports()
    assert r["kind"] == "irq_lock_inversion" and (r["lock"], r["other_lock"]) == ("count_lock", "stats_lock")
    # both usages, then the order: found as the order is added (check_irq_usage)
    t = fresh("c")
    t.end(0, 4096, context="hardirq")   # an end before its start: the count goes wrong, lockdep does not care
    t.is_active(0, 4096)
    assert t.kernel_reports() == []
    t.start(0, 4096)
    (r,) = t.kernel_reports()
    assert r["kind"] == "irq_lock_order" and "HARDIRQ-safe -> HARDIRQ-unsafe lock order detected" in r["message"]
    assert (r["lock"], r["other_lock"]) == ("stats_lock", "count_lock")


def test_a_second_lock_of_a_held_class_is_recursive_locking(tmp_path):
    src = tmp_path / "nested.c"
    src.write_text("""
#include <linux/spinlock.h>
#include <pybcache/kpatch.h>
struct pg { spinlock_t lock; };
static struct pg pages[2];
static int in(struct cached_dev *dc) { (void)dc; for (int i = 0; i < 2; i++) spin_lock_init(&pages[i].lock); return 0; }
static void st(struct cached_dev *dc, struct bio *bio)
{
        unsigned long f;
        (void)dc; (void)bio;
        spin_lock_irqsave(&pages[0].lock, f);
        spin_lock(&pages[1].lock);          /* same class (one spin_lock_init site), no _nested annotation */
        spin_unlock(&pages[1].lock);
        spin_unlock_irqrestore(&pages[0].lock, f);
}
static void en(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; }
static bool rd(struct cached_dev *dc, struct bio *bio) { (void)dc; (void)bio; return false; }
static const struct pybcache_patch_ops ops = { .name = "nested", .init = in, .write_start = st, .write_end = en,
                                               .read_bypass = rd };
PYBCACHE_PATCH(ops);
""")
    t = pybcache.load_patch(src).tracker(1 << 20)
    t.start(0, 512)
    t.start(0, 512)
    (r,) = t.kernel_reports()
    assert r["kind"] == "recursive_locking" and "possible recursive locking detected" in r["message"]


# -- cpapi's bottom halves beside the soft-irq contexts ------------------------------------------------------

def test_spin_lock_bh_in_process_context_agrees_with_a_soft_irq_end_and_plain_spin_lock_does_not(tmp_path):
    """lockdep marks SOFTIRQ-ON only with soft-irqs enabled: a lock taken under spin_lock_bh in write_start and
    read_bypass and with spin_lock in a soft-irq write_end is consistent; the same start with plain spin_lock
    (interrupts and soft-irqs on) is {IN-SOFTIRQ-W} -> {SOFTIRQ-ON-W}, in whichever order the usages come."""
    t = _fresh("ctx_bh_lock", tmp_path).tracker(1 << 30, end_contexts="softirq")
    for _ in range(3):
        t.start(0, 4096)
        assert t.is_active(0, 4096)
        t.end(0, 4096)
    assert t.stats()["ends_in"]["softirq"] == 3
    assert t.kernel_reports() == []
    assert not t.is_active(0, 4096)
    t.close()
    src = (CTX / "ctx_bh_lock.c").read_text().replace("#ifdef PLAIN_LOCK_IN_START", "#if 1")
    plain = tmp_path / "ctx_bh_plain.c"
    plain.write_text(src)
    t = pybcache.load_patch(plain).tracker(1 << 30, end_contexts="softirq")
    t.start(0, 4096)
    t.end(0, 4096)
    (r,) = t.kernel_reports()
    assert r["kind"] == "inconsistent_lock_state" and "{SOFTIRQ-ON-W} -> {IN-SOFTIRQ-W}" in r["message"], r
    assert r["end_context"] == "softirq"

