/* Checks shared by the C ABI test programs: CHECK counts a failed condition in `failures` (each
 * program defines it) and goes on; OK stops at a call that does not return PREFIXHIT_OK and
 * prints its status and the library's message; FAILS wants a given status and a message. */
#ifndef PREFIXHIT_TESTS_C_CHECK_H
#define PREFIXHIT_TESTS_C_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prefixhit/prefixhit.h"

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

#define OK(call)                                                          \
  do {                                                                    \
    prefixhit_status status_ = (call);                                    \
    if (status_ != PREFIXHIT_OK) {                                        \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, \
              prefixhit_status_name(status_), prefixhit_last_error());    \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

#define FAILS(call, status)                    \
  do {                                         \
    CHECK((call) == (status));                 \
    CHECK(strlen(prefixhit_last_error()) > 0); \
  } while (0)

#endif
