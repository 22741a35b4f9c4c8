/* The PyTorch child of `bench step --vs-torch` (bench_torch.c): tools/torch_step.py on the same
 * resolved config, its steps timed on request. */
#ifndef CLFORMER_BENCH_TORCH_H
#define CLFORMER_BENCH_TORCH_H

#include <stdio.h>
#include <sys/types.h>
#include "clformer/bench.h"
#include "clformer/config.h"

struct json_t;

typedef struct cf_torch_child {
  pid_t pid;
  FILE *to, *from;
  char tmp_config[64];
  char info[4096];         /* its first line: a JSON object describing the setup */
  struct json_t *setup;    /* that line, parsed */
} cf_torch_child;

/* Starts the script (o->torch_script, else found beside the executable) under $CLFORMER_PYTHON (else
 * /usr/bin/python3, else python3) with o's threads and warm-up, and reads its setup; on failure
 * nothing is left running or on disk. */
cf_status cf_torch_start(cf_torch_child *t, const cf_config *cfg, const cf_bench_step_options *o);
/* Runs n timed torch steps; appends their times (seconds) to v[*nv...]. */
cf_status cf_torch_run(cf_torch_child *t, int n, double *v, int *nv);
/* A field of the child's setup as text (a string as is, anything else as JSON), or "?". */
void cf_torch_setup_field(const cf_torch_child *t, const char *key, char *out, size_t n);
/* Tells a started child to quit and waits for it (see cf_torch_start); nothing when none started. */
void cf_torch_quit(cf_torch_child *t);

#endif
