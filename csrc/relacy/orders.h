/*
 * orders.h - the memory orders of the atomic variant's protocol, as the Relacy model uses them. The
 * names and orders are those of the MO_* table in csrc/pyb_tracker.c, one line each, in the same
 * form; csrc/relacy/check_orders.py (run by `make relacy` and tests/tracker/test_relacy_orders.py) fails if
 * the two tables differ. A mutant build (-DPYB_RELACY_MUTANT) weakens exactly one entry.
 */
#ifndef PYB_RELACY_ORDERS_H
#define PYB_RELACY_ORDERS_H

#define MO_GP_READ rl::mo_acquire
#ifdef PYB_RELACY_MUTANT
/* The mutant: the announcement is only a release store, so the reader's slot-word load may be
 * ordered before it (store->load) and a reclaimer may miss the reader and free its page. */
#define MO_ANNOUNCE rl::mo_release
#else
#define MO_ANNOUNCE rl::mo_seq_cst
#endif
#define MO_LEAVE rl::mo_release
#define MO_WORD_LOAD rl::mo_seq_cst
#define MO_WORD_INSTALL rl::mo_acq_rel
#define MO_WORD_CANCEL rl::mo_acq_rel
#define MO_CTR_INC rl::mo_relaxed
#define MO_CTR_DEC rl::mo_release
#define MO_CTR_CHECK rl::mo_acquire
#define MO_WORD_TAG rl::mo_seq_cst
#define MO_GP_ADVANCE rl::mo_seq_cst
#define MO_READER_POLL rl::mo_seq_cst
#define MO_ZERO_SCAN rl::mo_relaxed
#define MO_WORD_UNPUBLISH rl::mo_seq_cst
#define MO_WORD_UNTAG rl::mo_acq_rel
#define MO_RECLAIM_LOAD rl::mo_acquire

#endif
