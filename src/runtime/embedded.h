/* The table of .cl sources in cl/ compiled into the binary (generated at build time). */
#ifndef CLFORMER_EMBEDDED_H
#define CLFORMER_EMBEDDED_H
typedef struct cf_embedded_source {
  const char *name;   /* file name without .cl */
  const char *text;
} cf_embedded_source;
extern const cf_embedded_source cf_embedded_sources[];  /* ends with {NULL, NULL} */
#endif
