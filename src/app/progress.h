/* What a person sees of a training run, and how Ctrl-C reaches it: the command line's side of
 * cf_train_hooks (the library prints no progress and installs no signal handler). */
#ifndef CLFORMER_APP_PROGRESS_H
#define CLFORMER_APP_PROGRESS_H

#include "clformer/train.h"

typedef struct cf_cli_progress {
  int quiet;                 /* errors, and the one line of a stop by signal, only */
  int silent;                /* nothing at all: another rank of the job prints */
  int tty;                   /* stdout is a terminal: rows rewrite a live bar */
  const char *resume_hint;   /* after a stop; NULL: "resume with --resume DIR" */
} cf_cli_progress;

/* Hooks that print p's way to stdout and stop on SIGINT/SIGTERM (see cf_cli_signals_catch). */
cf_train_hooks cf_cli_train_hooks(cf_cli_progress *p);

/* From now until cf_cli_signals_restore, SIGINT and SIGTERM ask the running training to stop after
 * its current step (with a checkpoint) instead of killing the process. */
void cf_cli_signals_catch(void);
void cf_cli_signals_restore(void);
/* Whether a caught signal asked for a stop; which one (SIGINT or SIGTERM; 0: none); the exit code of a
 * run it stopped: 128 + the signal (130 SIGINT, 143 SIGTERM; 130 when none was caught). */
int cf_cli_stop_requested(void);
int cf_cli_stop_signal(void);
int cf_cli_stop_exit_code(void);

#endif
