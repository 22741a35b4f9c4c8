/* The training loop: forward, loss, backward, clip, optimizer step, schedule; validation on a
 * fixed set of batches; progress lines; metrics.csv; checkpoints; resume; clean stops on
 * divergence and on SIGINT/SIGTERM (after a checkpoint). No blocking read inside a step except
 * when a progress line, an evaluation or a checkpoint needs a number. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "clformer/runtime.h"
#include "clformer/ops.h"
#include "clformer/train.h"
#include "runtime/runtime.h"

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { stop_requested = sig; }

static int file_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static void format_duration(char *buf, size_t n, double s) {
  if (!isfinite(s) || s < 0) { snprintf(buf, n, "?"); return; }
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

cf_status cf_evaluate(cf_model *m, const cf_data *d, const cf_config *cfg, double *loss) {
  int B = cf_model_batch(m), T = cf_model_seq_len(m);
  int *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
  if (!in || !tg) { free(in); free(tg); return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); }
  double sum = 0;
  cf_status st = CF_OK;
  for (int i = 0; i < cfg->train.eval_batches && st == CF_OK; i++) {
    cf_data_batch(d, CF_SPLIT_VALID, cfg->seed, (uint64_t)i, B, T, in, tg);
    float l = NAN;
    st = cf_model_forward(m, in, tg, 0, 0);
    if (st == CF_OK) st = cf_model_loss(m, &l);
    sum += l;
  }
  free(in);
  free(tg);
  *loss = sum / cfg->train.eval_batches;
  return st;
}

/* metrics.csv: keep the header and the rows up to `step` (a resumed run rewrites what the
 * interrupted one logged after its last checkpoint), then append. */
static FILE *open_metrics(const char *dir, int step) {
  char path[2100], tmp[2200];
  snprintf(path, sizeof path, "%s/metrics.csv", dir);
  static const char *header = "step,lr,train_loss,valid_loss,grad_norm,tokens_per_s,wall_s\n";
  if (step > 0 && file_exists(path)) {
    char *text;
    if (cf_read_file(path, &text, NULL) != CF_OK) return NULL;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) { free(text); return NULL; }
    errno = 0;
    fputs(header, out);
    char *save, *line = strtok_r(text, "\n", &save);
    for (line = strtok_r(NULL, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
      if (atoi(line) <= step) fprintf(out, "%s\n", line);
    free(text);
    if (fclose(out) != 0 || rename(tmp, path) != 0) {
      int e = errno;
      unlink(tmp);
      errno = e;
      return NULL;
    }
    return fopen(path, "a");
  }
  FILE *f = fopen(path, "w");
  if (f) fputs(header, f);
  return f;
}

static cf_status write_text(const char *path, const cf_config *cfg) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  cf_config_write(cfg, f);
  fclose(f);
  cf_status st = cf_write_file_atomic(path, buf, len);
  free(buf);
  return st;
}

cf_status cf_train(cf_context *ctx, const cf_config *cfg, const cf_train_options *opts_in, cf_train_result *res) {
  cf_train_options opts = opts_in ? *opts_in : (cf_train_options){0};
  memset(res, 0, sizeof *res);
  const char *dir = opts.resume_dir ? opts.resume_dir : cfg->train.out;
  char ckpt[2100], cfg_path[2100];
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", dir);
  snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", dir);
  char status_path[2100];
  snprintf(status_path, sizeof status_path, "%s/run.json", dir);
  if (opts.resume_dir && file_exists(status_path)) {
    char *status = NULL;
    if (cf_read_file(status_path, &status, NULL) == CF_OK && strstr(status, "\"diverged\"")) {
      free(status);
      return CF_FAIL(CF_ERR_CHECKPOINT, "--resume %s: this run diverged; there is nothing to resume", dir);
    }
    free(status);
  }
  if (opts.resume_dir && !file_exists(ckpt))
    return CF_FAIL(CF_ERR_CHECKPOINT, "--resume %s: no checkpoint.safetensors there to resume from", dir);
  if (!opts.resume_dir && (file_exists(ckpt) || file_exists(cfg_path)))
    return CF_FAIL(CF_ERR_CONFIG, "train.out '%s' already holds a run: continue it with --resume %s, or choose another "
                   "train.out (clformer never overwrites a run)", dir, dir);

  cf_data data;
  CF_TRY(cf_data_open(&data, cfg));
  int B = cfg->data.batch_size, T = cfg->data.seq_len, N = B * T;
  cf_model *m = NULL;
  int *in = malloc((size_t)N * sizeof *in), *tg = malloc((size_t)N * sizeof *tg);
  cl_mem acc = NULL;  /* device-side sum of train losses since the last progress line */
  FILE *metrics = NULL;
  cf_status st = CF_OK;
  if (!in || !tg) { st = CF_FAIL(CF_ERR_NO_MEMORY, "out of memory"); goto done; }
  if ((st = cf_model_create(ctx, cfg, B, T, &m)) != CF_OK) goto done;
  if ((st = cf_buffer_create(ctx, 4, &acc)) != CF_OK) goto done;
  cf_train_state ts = {0, INFINITY, 0, 0, 0};
  if (opts.resume_dir) {
    char *saved_yaml = NULL;
    if ((st = cf_checkpoint_load(m, ckpt, &ts, &saved_yaml)) != CF_OK) goto done;
    /* a resumed run must be the same run: only its length and bookkeeping may change */
    cf_config saved;
    cf_config_defaults(&saved);
    int v = cf_verbosity();
    cf_set_verbosity(-1);
    cf_status ps = saved_yaml ? cf_config_load_string(&saved, saved_yaml, ckpt) : CF_ERR_CHECKPOINT;
    cf_set_verbosity(v);
    cf_clear_error();
    free(saved_yaml);
    if (ps == CF_OK) ps = cf_config_validate(&saved);
    if (ps != CF_OK) { st = CF_FAIL(CF_ERR_CHECKPOINT, "%s: the config stored in it is unreadable", ckpt); goto done; }
    char key[64], was[1100], now[1100];
    if (cf_config_first_difference(&saved, cfg, key, was, now)) {
      st = CF_FAIL(CF_ERR_CHECKPOINT, "--resume %s: %s was %s in this run and is %s now; a resumed run keeps its "
                   "config (only train.steps and the train.*_every/eval_batches/out keys may change)", dir, key, was, now);
      goto done;
    }
    if (ts.step >= cfg->train.steps) {
      st = CF_FAIL(CF_ERR_CONFIG, "--resume %s: the run already has %d steps; raise train.steps (now %d) to continue it",
                   dir, ts.step, cfg->train.steps);
      goto done;
    }
  } else {
    if (cf_mkdirs(dir) != CF_OK) { st = CF_FAIL(CF_ERR_CONFIG, "train.out: %s", cf_last_error()); goto done; }
    if ((st = cf_model_init(m, cfg->seed)) != CF_OK) goto done;
  }
  if ((st = write_text(cfg_path, cfg)) != CF_OK) goto done;
  metrics = open_metrics(dir, ts.step);
  if (!metrics) { st = CF_FAIL(CF_ERR_IO, "cannot write %s/metrics.csv: %s", dir, strerror(errno)); goto done; }
  const char *label = opts.label ? opts.label : "";
  const char *sep = opts.label ? " | " : "";
  if (!opts.quiet) {
    printf("%s%s%s-LN, %d layers, d_model %d, %d heads, d_ff %d: %.2fM parameters, %.1f MiB of device memory on %s\n",
           label, sep, cfg->model.norm == CF_NORM_PRE ? "Pre" : "Post", cfg->model.layers, cfg->model.d_model,
           cfg->model.heads, cfg->model.d_ff, cf_model_num_params(m) / 1e6, cf_model_device_bytes(m) / 1048576.0,
           cf_context_device(ctx)->name);
    printf("%s%sdata: %zu training and %zu validation bytes, unigram entropy %.3f nats/byte; %s step %d of %d\n", label,
           sep, data.n_train, data.n_valid, data.unigram_entropy, opts.resume_dir ? "resuming after" : "starting at",
           ts.step, cfg->train.steps);
    fflush(stdout);
  }

  stop_requested = 0;
  struct sigaction sa = {0}, old_int, old_term;
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  int tty = isatty(STDOUT_FILENO) && !opts.quiet;
  double t_start = cf_now(), t_last = t_start, wall0 = ts.wall_s;
  int last_log_step = ts.step, start_step = ts.step, steps = cfg->train.steps;
  float zero = 0;
  if ((st = cf_write(ctx, cf_at(acc, 0), &zero, 1)) != CF_OK) goto restore;
  double valid = NAN, train_loss = NAN;
  float gnorm = NAN;
  for (int step = ts.step + 1; step <= steps; step++) {
    cf_data_batch(&data, CF_SPLIT_TRAIN, cfg->seed, (uint64_t)(step - 1), B, T, in, tg);
    float lr = (float)cf_config_lr(cfg, step);
    if ((st = cf_model_forward(m, in, tg, (uint32_t)step, 1)) != CF_OK) break;
    if ((st = cf_model_backward(m)) != CF_OK) break;
    if ((st = cf_model_grad_norm(m)) != CF_OK) break;
    if ((st = cf_model_update(m, lr, step)) != CF_OK) break;
    if ((st = cf_model_add_loss(m, cf_at(acc, 0))) != CF_OK) break;
    int stop = stop_requested != 0;  /* read once: the checkpoint and the exit must agree */
    int last = step == steps || stop;
    int do_log = step % cfg->train.log_every == 0 || last;
    int do_eval = (cfg->train.eval_every && step % cfg->train.eval_every == 0) || last;
    int do_ckpt = (cfg->train.checkpoint_every && step % cfg->train.checkpoint_every == 0) || last;
    if (!(do_log || do_eval || do_ckpt) && !tty) continue;
    if (do_log || do_eval || do_ckpt) {
      float sum;
      if ((st = cf_read(ctx, cf_at(acc, 0), &sum, 1)) != CF_OK) break;
      if ((st = cf_model_read_grad_norm(m, &gnorm)) != CF_OK) break;
      if ((st = cf_write(ctx, cf_at(acc, 0), &zero, 1)) != CF_OK) break;
      train_loss = sum / (step - last_log_step);
      /* Diverged: a non-finite loss or gradient, or a loss three times that of guessing uniformly
       * (3 ln 256 = 16.6 nats), which no learning run comes back from in practice. */
      if (!isfinite(train_loss) || !isfinite(gnorm) || train_loss > 3 * log((double)CF_BYTE_VOCAB)) {
        ts.diverged_step = step;
        fprintf(metrics, "%d,%.6g,%.6g,,%.6g,,%.3f\n", step, lr, train_loss, gnorm, wall0 + cf_now() - t_start);
        fflush(metrics);
        if (!opts.quiet)
          printf("%s%sstep %d: loss %g, gradient norm %g (not finite, or above 3 ln 256): the run diverged; %s%.0d\n",
                 label, sep, step, train_loss, gnorm,
                 file_exists(ckpt) ? "the last good checkpoint is kept, from step " : "it diverged before its first checkpoint",
                 file_exists(ckpt) ? ts.step : 0);
        break;
      }
      valid = NAN;
      if (do_eval) {
        if ((st = cf_evaluate(m, &data, cfg, &valid)) != CF_OK) break;
        if (!isfinite(valid)) {
          ts.diverged_step = step;
          if (!opts.quiet) printf("%s%sstep %d: the validation loss is not finite: the run diverged\n", label, sep, step);
          break;
        }
        if (valid < ts.best_valid) { ts.best_valid = valid; ts.best_step = step; }
      }
      double now = cf_now(), elapsed = wall0 + now - t_start;
      double tps = (double)(step - last_log_step) * N / (now - t_last);
      double per_step = (now - t_start) / (step - start_step);
      char el[32], eta[32], vbuf[32] = "";
      format_duration(el, sizeof el, elapsed);
      format_duration(eta, sizeof eta, per_step * (double)(steps - step + opts.eta_extra_steps));
      if (do_eval) snprintf(vbuf, sizeof vbuf, " | valid %.4f", valid);
      fprintf(metrics, "%d,%.6g,%.6g,", step, lr, train_loss);
      if (do_eval) fprintf(metrics, "%.6g", valid);
      fprintf(metrics, ",%.6g,%.1f,%.3f\n", gnorm, tps, elapsed);
      fflush(metrics);
      if (!opts.quiet && (do_log || do_eval))
        printf("%s%s%sstep %*d/%d | loss %.4f%s | lr %.2e | gnorm %.3g | %.0f tok/s | %s | ETA %s\n", tty ? "\r\033[K" : "",
               label, sep, (int)snprintf(NULL, 0, "%d", steps), step, steps, train_loss, vbuf, lr, gnorm, tps, el, eta);
      fflush(stdout);
      res->tokens_per_s = tps;
      last_log_step = step;
      t_last = now;
      if (do_ckpt) {
        ts.step = step;
        ts.wall_s = elapsed;
        if ((st = cf_checkpoint_save(m, cfg, &ts, ckpt)) != CF_OK) break;
      }
    } else if (tty) {
      /* a live bar between progress lines */
      int width = 30, done_w = (int)((double)width * step / steps);
      printf("\r\033[K%s%s[%.*s%*s] %d/%d", label, sep, done_w, "##############################", width - done_w, "",
             step, steps);
      fflush(stdout);
    }
    if (stop) {
      res->interrupted = 1;
      if (!opts.quiet) {
        if (opts.resume_hint) printf("%s%sstopped by signal after step %d; checkpoint saved: %s\n", label, sep, step, opts.resume_hint);
        else printf("%s%sstopped by signal after step %d; checkpoint saved: resume with --resume %s\n", label, sep, step, dir);
      }
      break;
    }
  }
  if (st == CF_OK) {
    /* run.json: how the run ended, for people and for `compare` (the checkpoint is untouched on
     * divergence: it holds the last good weights) */
    char path[2100], buf[1024];
    snprintf(path, sizeof path, "%s/run.json", dir);
    int n = snprintf(buf, sizeof buf,
                     "{\"status\": \"%s\", \"steps_done\": %d, \"steps\": %d, \"diverged_step\": %d, "
                     "\"best_valid\": %.6g, \"best_step\": %d, \"wall_s\": %.3f, \"tokens_per_s\": %.1f}\n",
                     ts.diverged_step ? "diverged" : res->interrupted ? "interrupted" : "finished",
                     ts.diverged_step ? ts.diverged_step - 1 : ts.step, steps, ts.diverged_step,
                     isfinite(ts.best_valid) ? ts.best_valid : -1.0, ts.best_step, wall0 + cf_now() - t_start,
                     res->tokens_per_s);
    st = cf_write_file_atomic(path, buf, (size_t)n);
  }
  res->state = ts;
  res->final_valid = valid;
  res->final_train = train_loss;
restore:
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
done:
  if (metrics) fclose(metrics);
  cf_buffer_free(acc);
  cf_model_free(m);
  cf_data_close(&data);
  free(in);
  free(tg);
  return st;
}
