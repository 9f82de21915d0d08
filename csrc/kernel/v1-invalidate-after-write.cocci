// SPDX-License-Identifier: GPL-2.0-only
// pybcache's "v1 approach" to the stale read after a bypass write (drivers/md/bcache/request.c):
// invalidate the written range in the cache only once the write to the backing device has completed.
//
// In cached_dev_write() a bypass write submits its backing bio and, at once, bch_data_insert(), which
// invalidates the range asynchronously; a read miss that reads the backing device after that invalidation
// and before the write lands inserts the old data into the cache for good. Here the bypass branch instead
// waits for its backing bio (continue_at() runs the next step once the closure's refs are dropped, the
// backing bio's among them) and only then invalidates, in cached_dev_write_bypass_insert(). A miss that raced
// with the write inserted its key before the invalidation, which now removes it; a miss that comes after the
// write reads the new data.
//
// `pybcache kernel diff v1` prints the diff this makes against the installed 6.12 source; `--patch gen:v1`
// builds with it.

@bypass_waits@
statement S;
@@
 static void cached_dev_write(...)
 {
 ...
 if (s->iop.bypass) {
 ...
 closure_bio_submit(s->iop.c, bio, cl);
+/* v1: invalidate the cache once the backing write has completed */
+continue_at(cl, cached_dev_write_bypass_insert, bcache_wq);
+return;
 } else S
 ...
 }

@new_step depends on bypass_waits@
@@
+/* the bypass write's second step: its backing bio has completed, now invalidate the cached range */
+static void cached_dev_write_bypass_insert(struct work_struct *ws)
+{
+	struct closure *cl = container_of(ws, struct closure, work);
+	struct search *s = container_of(cl, struct search, cl);
+
+	closure_call(&s->iop.cl, bch_data_insert, NULL, cl);
+	continue_at(cl, cached_dev_write_complete, NULL);
+}
+
 static void cached_dev_write(...)
 {
 ...
 }
