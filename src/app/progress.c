/* Progress lines of `train` and `compare`, and their SIGINT/SIGTERM. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "app/progress.h"
#include "clformer/dist.h"

static volatile sig_atomic_t stop_signal;
static struct sigaction old_int, old_term;

static void on_signal(int sig) {
  if (!stop_signal) stop_signal = sig;  /* the first signal decides the exit code */
}

void cf_cli_signals_catch(void) {
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  stop_signal = 0;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
}

void cf_cli_signals_restore(void) {
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
}

int cf_cli_stop_requested(void) { return stop_signal != 0; }

int cf_cli_stop_signal(void) { return stop_signal; }

int cf_cli_stop_exit_code(void) { return 128 + (stop_signal ? stop_signal : SIGINT); }

static const char *signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal"; }

static int should_stop(void *user) { return cf_cli_stop_requested(); }

static void format_duration(char *buf, size_t n, double s) {
  if (!isfinite(s) || s < 0) { snprintf(buf, n, "?"); return; }
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static double mib(size_t bytes) { return (double)bytes / 1048576.0; }

static void print_started(const cf_train_event *e, const char *label, const char *sep) {
  const cf_config *cfg = e->cfg;
  if (cfg->model.arch == CF_ARCH_ENCODER_DECODER)
    printf("%s%sencoder-decoder: %d encoder and %d decoder blocks, vocabulary %d (BPE)\n", label, sep,
           cfg->model.encoder_layers, cfg->model.layers, cfg->model.vocab);
  printf("%s%s%s-LN, %d %slayers, d_model %d, %d heads, d_ff %d: %.2fM parameters, %.1f MiB of device memory on %s\n",
         label, sep, cfg->model.norm == CF_NORM_PRE ? "Pre" : "Post", cfg->model.layers,
         cfg->model.arch == CF_ARCH_ENCODER_DECODER ? "decoder " : "", cfg->model.d_model,
         cfg->model.heads, cfg->model.d_ff, e->params / 1e6, e->device_bytes / 1048576.0, e->device_name);
  const cf_memory_plan *p = e->plan;
  char acc[96] = "";
  if (cfg->train.accumulate > 1)
    snprintf(acc, sizeof acc, "; %d micro-batches accumulated a step (%d sequences)", cfg->train.accumulate,
             cfg->train.accumulate * p->batch);
  printf("%s%smemory: %.1f of %.1f MiB (parameters %.1f, gradients %.1f, optimizer state %.1f, activations %.1f for "
         "a micro-batch of %d x %d, workspaces %.1f)%s\n", label, sep, mib(p->total), mib(p->global_mem),
         mib(p->parameters), mib(p->gradients), mib(p->optimizer), mib(p->activations), p->batch, p->seq_len,
         mib(p->workspace), acc);
  if (cfg->model.arch == CF_ARCH_ENCODER_DECODER)
    printf("%s%sdata: %zu training pairs (%zu over data.max_len left out) in %d batches an epoch, %zu validation "
           "pairs; %s step %d of %d\n", label, sep, e->train_pairs, e->left_out, e->epoch_steps, e->valid_pairs,
           e->resumed ? "resuming after" : "starting at", e->step, e->steps);
  else
    printf("%s%sdata: %zu training and %zu validation bytes, unigram entropy %.3f nats/byte; %s step %d of %d\n",
           label, sep, e->train_bytes, e->valid_bytes, e->unigram_entropy, e->resumed ? "resuming after" : "starting at",
           e->step, e->steps);
}

static void print_row(const cf_train_event *e, const char *label, const char *sep, int tty) {
  char el[32], eta[32], vbuf[64] = "";
  format_duration(el, sizeof el, e->elapsed_s);
  format_duration(eta, sizeof eta, e->eta_s);
  if (!isnan(e->valid_loss)) snprintf(vbuf, sizeof vbuf, " | valid %.4f", e->valid_loss);
  if (!isnan(e->bleu)) snprintf(vbuf + strlen(vbuf), sizeof vbuf - strlen(vbuf), " | BLEU %.2f", e->bleu);
  printf("%s%s%sstep %*d/%d | loss %.4f%s | lr %.2e | gnorm %.3g | %.0f tok/s | %s | ETA %s\n", tty ? "\r\033[K" : "",
         label, sep, (int)snprintf(NULL, 0, "%d", e->steps), e->step, e->steps, e->train_loss, vbuf, e->lr, e->grad_norm,
         e->tokens_per_s, el, eta);
}

static void why_diverged(const cf_train_event *e, char *buf, size_t n) {
  if (!isfinite(e->train_loss)) snprintf(buf, n, "the loss is not finite");
  else if (e->train_loss > e->loss_limit)
    snprintf(buf, n, "the loss is above %.1f, three times a uniform guess's", e->loss_limit);
  else snprintf(buf, n, "the gradient norm is not finite");
}

static void print_diverged(const cf_train_event *e, const char *label, const char *sep) {
  if (e->in_validation) {
    printf("%s%sstep %d: the validation loss is not finite: the run diverged\n", label, sep, e->step);
    return;
  }
  char why[96];
  why_diverged(e, why, sizeof why);
  printf("%s%sstep %d: loss %g, gradient norm %g: the run diverged (%s); ", label, sep, e->step, e->train_loss,
         e->grad_norm, why);
  if (e->tensor)
    printf("the first gradient to go non-finite (backward from the loss) is %s's (%d of %d tensors); ", e->tensor,
           e->tensors, e->num_tensors);
  if (e->checkpoint_step) printf("the last good checkpoint is kept, from step %d\n", e->checkpoint_step);
  else printf("it diverged before its first checkpoint\n");
}

static void print_stopped(const cf_cli_progress *p, const cf_train_event *e, const char *label, const char *sep) {
  if (p->resume_hint)
    printf("%s%sstopped by signal after step %d (%s); checkpoint saved: %s\n", label, sep, e->step,
           signal_name(stop_signal), p->resume_hint);
  else
    printf("%s%sstopped by signal after step %d (%s); checkpoint saved: resume with --resume %s\n", label, sep, e->step,
           signal_name(stop_signal), e->dir);
}

static void show(void *user, const cf_train_event *e) {
  const cf_cli_progress *p = user;
  const char *label = e->label ? e->label : "", *sep = e->label ? " | " : "";
  if (p->silent) return;
  if (e->kind == CF_TRAIN_STOPPED) {  /* with --quiet too: it says how to continue */
    print_stopped(p, e, label, sep);
    fflush(stdout);
    return;
  }
  if (p->quiet) return;
  switch (e->kind) {
    case CF_TRAIN_STARTED: print_started(e, label, sep); break;
    case CF_TRAIN_LOGGED: print_row(e, label, sep, p->tty); break;
    case CF_TRAIN_DIVERGED: print_diverged(e, label, sep); break;
    case CF_TRAIN_TICK: {
      int width = 30, done_w = (int)((double)width * e->step / e->steps);
      printf("\r\033[K%s%s[%.*s%*s] %d/%d", label, sep, done_w, "##############################", width - done_w, "",
             e->step, e->steps);
      break;
    }
    case CF_TRAIN_STOPPED: break;  /* above */
  }
  fflush(stdout);
}

cf_train_hooks cf_cli_train_hooks(cf_cli_progress *p) {
  p->tty = isatty(STDOUT_FILENO) && !p->quiet && cf_dist_world()->size == 1;  /* mpirun passes a pty */
  return (cf_train_hooks){.progress = show, .should_stop = should_stop, .user = p, .ticks = p->tty};
}
