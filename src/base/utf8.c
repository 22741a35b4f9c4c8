/* Text made valid UTF-8 for those who read it (a person, BLEU). */
#include <stdlib.h>
#include <string.h>
#include "base/base.h"

/* Bytes of s that do not form UTF-8 as U+FFFD, each maximal invalid run of a character's bytes as one (what
 * Python's bytes.decode('utf-8', errors='replace') gives): a model that has learned little may end a
 * sentence inside a character or emit any byte, and BLEU (and whoever reads the output) takes text. */
cf_status cf_utf8_replace_invalid(char **text, size_t n) {
  const unsigned char *s = (const unsigned char *)*text;
  size_t o = 0;
  unsigned char *out = malloc(3 * n + 1);  /* at worst each byte becomes the 3 bytes of U+FFFD */
  if (!out) return CF_FAIL(CF_ERR_NO_MEMORY, "out of memory");
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    int need = c == 0 ? -1 : c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
    /* the second byte's range rules out overlong forms, surrogates and code points past U+10FFFF */
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    int got = 0;
    while (need > 0 && got < need && i + 1 + got < n) {
      unsigned b = s[i + 1 + got];
      if (got == 0 ? b < lo || b > hi : b < 0x80 || b > 0xBF) break;
      got++;
    }
    if (need >= 0 && got == need) {
      memcpy(out + o, s + i, (size_t)need + 1);
      o += (size_t)need + 1;
    } else {
      memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
    }
    i += (size_t)got + 1;
  }
  out[o] = 0;
  free(*text);
  *text = (char *)out;
  return CF_OK;
}
