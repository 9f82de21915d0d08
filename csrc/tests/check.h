/* check.h - the C test binaries' one assertion: report a failed check with its location and go on. */
#ifndef PYB_TESTS_CHECK_H
#define PYB_TESTS_CHECK_H

#include <stdio.h>

/* Failed checks so far; main() exits non-zero if any. */
static int failures;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

#endif /* PYB_TESTS_CHECK_H */
