/* A tiny SVG line-plot writer for the experiments' figures: panels with axes, ticks, optional
 * log scales, polylines, error bars and a legend. Readable in any browser; no other tool needed. */
#ifndef CLFORMER_SVG_H
#define CLFORMER_SVG_H

#include <stdio.h>

typedef struct svg_panel {
  double x, y, w, h;            /* placement of the plot area in the figure, pixels */
  double xmin, xmax, ymin, ymax;
  int xlog, ylog;
  const char *title, *xlabel, *ylabel;
  double legend_w;              /* width of the legend box; 0: fitted to 40 characters */
} svg_panel;

FILE *svg_begin(const char *path, int width, int height);
void svg_end(FILE *f);
/* Axes, ticks, grid, labels and title of a panel. */
void svg_axes(FILE *f, const svg_panel *p);
/* A polyline through the finite points; dash "" for solid, e.g. "6,3" for dashed. */
void svg_line(FILE *f, const svg_panel *p, const double *xs, const double *ys, int n, const char *color,
              double width, double opacity, const char *dash);
/* Vertical error bars from lo to hi at each x. */
void svg_errorbars(FILE *f, const svg_panel *p, const double *xs, const double *lo, const double *hi, int n,
                   const char *color);
/* One legend entry (a short line and the text) at row `row` inside the panel's top-right corner. */
void svg_legend(FILE *f, const svg_panel *p, int row, const char *color, const char *dash, const char *text);
void svg_text(FILE *f, double x, double y, const char *text, int size, const char *anchor);
/* A distinct colour for series i. */
const char *svg_color(int i);

#endif
