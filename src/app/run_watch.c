/* What the command line tells after a training run that a runtime error stopped (a device error in
 * the middle of a run, CL_OUT_OF_RESOURCES say): where it stopped, what the device had, and whether
 * the last checkpoint is whole and how to continue from it. The library's own line has already named
 * the failing OpenCL call and the error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "app/cli.h"
#include "clformer/train.h"
#include "runtime/runtime.h"

static void watch_event(void *user, const cf_train_event *e) {
  cf_cli_run_watch *w = user;
  if (e->kind == CF_TRAIN_STARTED) {
    w->started = 1;
    w->ended = 0;
    w->device_bytes = e->device_bytes;
    w->last_step = e->step;
  } else if (e->kind == CF_TRAIN_LOGGED || e->kind == CF_TRAIN_TICK) w->last_step = e->step;
  if (e->kind == CF_TRAIN_DIVERGED || (e->kind == CF_TRAIN_LOGGED && e->step >= e->steps)) w->ended = 1;
  w->steps = e->steps;
  snprintf(w->dir, sizeof w->dir, "%s", e->dir ? e->dir : "");
  snprintf(w->label, sizeof w->label, "%s", e->label ? e->label : "");
  /* ticks are asked for always (the step in progress), but passed on only when the display wants them */
  if (w->inner.progress && (e->kind != CF_TRAIN_TICK || w->inner.ticks)) w->inner.progress(w->inner.user, e);
}

static int watch_stop(void *user) {
  const cf_cli_run_watch *w = user;
  return w->inner.should_stop && w->inner.should_stop(w->inner.user);
}

cf_train_hooks cf_cli_run_watch_hooks(cf_cli_run_watch *w, cf_train_hooks inner) {
  memset(w, 0, sizeof *w);
  w->inner = inner;
  return (cf_train_hooks){.progress = watch_event, .should_stop = watch_stop, .user = w, .ticks = 1};
}

static int is_out_of_memory(cf_status st) {
  return st == CL_OUT_OF_RESOURCES || st == CL_MEM_OBJECT_ALLOCATION_FAILURE || st == CL_OUT_OF_HOST_MEMORY;
}

static double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

/* The step of dir's checkpoint when it reads whole (-1: none there, -2: there but unreadable). */
static int checkpoint_step(const char *dir) {
  char path[2200];
  struct stat sb;
  snprintf(path, sizeof path, "%s/checkpoint.safetensors", dir);
  if (stat(path, &sb) != 0) return -1;
  cf_st_file f;
  int v = cf_verbosity();
  cf_set_verbosity(-1);  /* a damaged file is said below, in words about the run */
  cf_status st = cf_safetensors_read(path, &f);
  cf_set_verbosity(v);
  cf_clear_error();
  if (st != CF_OK) return -2;
  const char *s = cf_safetensors_meta(&f, "step");
  long step;
  int ok = s && cf_parse_long(s, 0, 2147483647, &step);
  cf_safetensors_free(&f);
  return ok ? (int)step : -2;
}

/* The checkpoint's state and the command that continues. */
static void say_checkpoint(const char *cmd, const char *dir, const char *resume) {
  char cfg_path[2200];
  struct stat sb;
  snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", dir);
  int step = checkpoint_step(dir);
  if (step >= 0)
    fprintf(stderr, "clformer %s: the last checkpoint, of step %d, is intact (%s/checkpoint.safetensors): %s\n", cmd,
            step, dir, resume);
  else if (step == -2)
    fprintf(stderr, "clformer %s: %s/checkpoint.safetensors does not read whole; move the run away and start it "
            "again\n", cmd, dir);
  else if (stat(cfg_path, &sb) == 0)
    fprintf(stderr, "clformer %s: no checkpoint was written yet; %s (from step 0)\n", cmd, resume);
  else fprintf(stderr, "clformer %s: nothing of the run was written; run the same command again\n", cmd);
}

/* "in step 13 of 20 (...)", or where before or after the steps the run stopped. */
static void say_where(const cf_cli_run_watch *w, char *buf, size_t n) {
  if (!w->started) snprintf(buf, n, "while setting up the run, before its first step");
  else if (w->ended) snprintf(buf, n, "after the run's last step (%d)", w->last_step);
  else if (w->last_step == 0) snprintf(buf, n, "in step 1 of %d (the run stopped there, before any step was done)", w->steps);
  else snprintf(buf, n, "in step %d of %d (the run stopped there; step %d was the last one done)", w->last_step + 1,
                w->steps, w->last_step);
}

void cf_cli_run_failed(const char *cmd, const cf_cli_run_watch *w, cf_status st, cf_context *ctx, const char *dir,
                       const char *resume) {
  if (cf_exit_code(st) != 1) return;  /* bad input: its own line says all */
  if (w->ended && !dir) return;       /* compare: not in a run (the last one watched ended) */
  if (w->dir[0]) dir = w->dir;
  if (!dir || !dir[0]) return;        /* no run began */
  char where[200];
  say_where(w, where, sizeof where);
  fprintf(stderr, "clformer %s: %s%s%s with %s %s\n", cmd, w->label, w->label[0] ? " " : "",
          st < 0 && st > -1000 ? "the device failed" : "an error stopped the run", cf_status_str(st), where);
  const cf_device_info *d = ctx ? cf_context_device(ctx) : NULL;
  if (is_out_of_memory(st) && w->started && d)
    fprintf(stderr, "clformer %s: the run's buffers take %.1f MiB of %s's %.1f MiB (at most %.1f MiB in one buffer)\n",
            cmd, mib(w->device_bytes), d->name, mib((double)d->global_mem), mib((double)d->max_alloc));
  else if (is_out_of_memory(st) && d)
    fprintf(stderr, "clformer %s: %s has %.1f MiB of memory (at most %.1f MiB in one buffer) and could not allocate the "
            "run's buffers\n", cmd, d->name, mib((double)d->global_mem), mib((double)d->max_alloc));
  if (is_out_of_memory(st))
    fprintf(stderr, "clformer %s: the device ran out of memory or resources: close other programs using it, or choose "
            "a smaller model or data.batch_size, or another device (--device)\n", cmd);
  say_checkpoint(cmd, dir, resume);
}
