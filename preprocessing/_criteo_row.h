/* What preprocessing/_criteo.c and preprocessing/_lists.c share: the fixed part of a Criteo row (its label and
 * 13 integer fields) and the log1p table its integers go through. Included by both (static: one copy each).
 */
#ifndef DLRMFLOW_CRITEO_ROW_H
#define DLRMFLOW_CRITEO_ROW_H

#include <Python.h>
#include <math.h>
#include <stdint.h>

#define N_INT 13
#define N_CAT 26
#define TABLE 65536

static float log1p_table[TABLE];

/* log1p of 0..TABLE-1, filled once when the module is imported */
static void fill_log1p_table(void) {
    for (int i = 0; i < TABLE; i++)
        log1p_table[i] = (float)log1p((double)i);
}

/* Row r's label ("0" or "1") and 13 integers (empty, or an optional '-' and 1..15 decimal digits, not a negative
 * zero) at p, each field ended by a tab: label[r], num[j*n + r] = (float)log1p(max(x, 0)) (0 where missing) and
 * missing[j] (its empty fields). Returns p at the first categorical field, or NULL where the row is irregular. The
 * block ends with '\n', which stops every scan: no bounds checks are needed. */
static const unsigned char *parse_label_and_ints(const unsigned char *p, Py_ssize_t n, Py_ssize_t r, int8_t *label,
                                                 float *num, int64_t *missing) {
    unsigned char c = p[0];
    if ((c != '0' && c != '1') || p[1] != '\t')
        return NULL;
    label[r] = (int8_t)(c - '0');
    p += 2;
    for (int j = 0; j < N_INT; j++) {
        float v = 0.0f;
        if (*p == '\t') {
            missing[j]++;
        } else {
            int neg = 0;
            if (*p == '-') {
                neg = 1;
                p++;
            }
            const unsigned char *s = p;
            uint64_t x = 0;
            while ((unsigned)(*p - '0') < 10) {
                x = x * 10 + (uint64_t)(*p - '0');
                p++;
            }
            Py_ssize_t digits = p - s;
            if (*p != '\t' || digits == 0 || digits > 15)
                return NULL;
            if (neg) {
                if (x == 0)
                    return NULL;   /* "-0": the polars path keeps the sign (-0.0) */
            } else {
                v = x < TABLE ? log1p_table[x] : (float)log1p((double)x);
            }
        }
        num[(Py_ssize_t)j * n + r] = v;
        p++;   /* the tab */
    }
    return p;
}

#endif
