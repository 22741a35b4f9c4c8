/* SVG plots (see svg.h). */
#include <math.h>
#include <string.h>
#include "experiments/svg.h"

static const char *palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                                "#17becf", "#7f7f7f", "#bcbd22"};
const char *svg_color(int i) { return palette[(i % 10 + 10) % 10]; }

FILE *svg_begin(const char *path, int width, int height) {
  FILE *f = fopen(path, "w");
  if (!f) return NULL;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
             "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          width, height, width, height);
  return f;
}

void svg_end(FILE *f) {
  fputs("</svg>\n", f);
  fclose(f);
}

static void escape(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else fputc(*s, f);
  }
}

void svg_text(FILE *f, double x, double y, const char *text, int size, const char *anchor) {
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" text-anchor=\"%s\">", x, y, size, anchor);
  escape(f, text);
  fputs("</text>\n", f);
}

static double tx(const svg_panel *p, double v) {
  double a = p->xlog ? log10(p->xmin) : p->xmin, b = p->xlog ? log10(p->xmax) : p->xmax, t = p->xlog ? log10(v) : v;
  return p->x + (t - a) / (b - a) * p->w;
}
static double ty(const svg_panel *p, double v) {
  double a = p->ylog ? log10(p->ymin) : p->ymin, b = p->ylog ? log10(p->ymax) : p->ymax, t = p->ylog ? log10(v) : v;
  return p->y + p->h - (t - a) / (b - a) * p->h;
}

/* "Nice" linear ticks: 1, 2 or 5 times a power of ten, about 5 of them. */
static double nice_step(double span) {
  double raw = span / 5, mag = pow(10, floor(log10(raw))), r = raw / mag;
  return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

static void fmt(char *buf, size_t n, double v) {
  if (v != 0 && (fabs(v) >= 1e5 || fabs(v) < 1e-4)) snprintf(buf, n, "%.0e", v);
  else snprintf(buf, n, "%g", v);
}

static void ticks(FILE *f, const svg_panel *p, int axis) {
  double lo = axis ? p->ymin : p->xmin, hi = axis ? p->ymax : p->xmax;
  int lg = axis ? p->ylog : p->xlog;
  double vals[64];
  int n = 0;
  if (lg) {
    for (double d = pow(10, floor(log10(lo))); d <= hi * 1.0001 && n < 60; d *= 10)
      for (int k = 1; k <= 9 && n < 60; k++) {
        double v = d * k;
        if (v >= lo * 0.9999 && v <= hi * 1.0001 && (k == 1 || (hi / lo < 100 && (k == 2 || k == 5)))) vals[n++] = v;
      }
  } else {
    double s = nice_step(hi - lo);
    for (double v = ceil(lo / s) * s; v <= hi + 1e-9 * s && n < 60; v += s) vals[n++] = fabs(v) < 1e-12 * s ? 0 : v;
  }
  for (int i = 0; i < n; i++) {
    char b[32];
    fmt(b, sizeof b, vals[i]);
    if (axis) {
      double y = ty(p, vals[i]);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", p->x, y, p->x + p->w, y);
      svg_text(f, p->x - 5, y + 4, b, 11, "end");
    } else {
      double x = tx(p, vals[i]);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", x, p->y, x, p->y + p->h);
      svg_text(f, x, p->y + p->h + 15, b, 11, "middle");
    }
  }
}

void svg_axes(FILE *f, const svg_panel *p) {
  ticks(f, p, 0);
  ticks(f, p, 1);
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", p->x, p->y,
          p->w, p->h);
  if (p->title) svg_text(f, p->x + p->w / 2, p->y - 8, p->title, 14, "middle");
  if (p->xlabel) svg_text(f, p->x + p->w / 2, p->y + p->h + 34, p->xlabel, 12, "middle");
  if (p->ylabel) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">",
            p->x - 62, p->y + p->h / 2, p->x - 62, p->y + p->h / 2);
    escape(f, p->ylabel);
    fputs("</text>\n", f);
  }
}

static int inside(const svg_panel *p, double x, double y) {
  return isfinite(x) && isfinite(y) && (!p->xlog || x > 0) && (!p->ylog || y > 0);
}

static double clampy(const svg_panel *p, double y) {
  double v = ty(p, y);
  return v < p->y ? p->y : v > p->y + p->h ? p->y + p->h : v;
}

void svg_line(FILE *f, const svg_panel *p, const double *xs, const double *ys, int n, const char *color, double width,
              double opacity, const char *dash) {
  int open = 0;
  for (int i = 0; i < n; i++) {
    if (!inside(p, xs[i], ys[i]) || xs[i] < p->xmin || xs[i] > p->xmax) {
      if (open) { fputs("\"/>\n", f); open = 0; }
      continue;
    }
    if (!open) {
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" stroke-opacity=\"%.2f\"%s%s%s points=\"",
              color, width, opacity, dash && *dash ? " stroke-dasharray=\"" : "", dash && *dash ? dash : "",
              dash && *dash ? "\"" : "");
      open = 1;
    }
    fprintf(f, "%.1f,%.1f ", tx(p, xs[i]), clampy(p, ys[i]));
  }
  if (open) fputs("\"/>\n", f);
}

void svg_errorbars(FILE *f, const svg_panel *p, const double *xs, const double *lo, const double *hi, int n,
                   const char *color) {
  for (int i = 0; i < n; i++) {
    if (!inside(p, xs[i], lo[i]) || !inside(p, xs[i], hi[i])) continue;
    double x = tx(p, xs[i]);
    fprintf(f, "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fh6M%.1f %.1fh6\" stroke=\"%s\" fill=\"none\"/>\n", x, clampy(p, lo[i]),
            clampy(p, hi[i]), x - 3, clampy(p, lo[i]), x - 3, clampy(p, hi[i]), color);
  }
}

void svg_legend(FILE *f, const svg_panel *p, int row, const char *color, const char *dash, const char *text) {
  double x = p->x + p->w - (p->legend_w > 0 ? p->legend_w : 40 * 6.3 + 40), y = p->y + 16 + 16 * row;
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"%s%s%s/>\n", x,
          y - 4, x + 24, y - 4, color, dash && *dash ? " stroke-dasharray=\"" : "", dash && *dash ? dash : "",
          dash && *dash ? "\"" : "");
  svg_text(f, x + 30, y, text, 11, "start");
}
