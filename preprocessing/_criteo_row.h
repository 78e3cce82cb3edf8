/* What preprocessing/_criteo.c and preprocessing/_lists.c share: the walk over a block's rows (parse_rows), the
 * fixed part of a Criteo row (its label and 13 integer fields), a one-hot categorical field, and the tables they go
 * through (log1p, hex digits). Included by both (static: one copy each).
 */
#ifndef DLRMFLOW_CRITEO_ROW_H
#define DLRMFLOW_CRITEO_ROW_H

#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define N_INT 13
#define N_CAT 26
#define TABLE 65536

static float log1p_table[TABLE];
static signed char hexval[256];   /* a byte's hex digit value, -1 for any other byte */

/* log1p of 0..TABLE-1, filled once when the module is imported */
static void fill_log1p_table(void) {
    for (int i = 0; i < TABLE; i++)
        log1p_table[i] = (float)log1p((double)i);
}

/* the hex digit values, filled once when the module is imported */
static void fill_hex_table(void) {
    memset(hexval, -1, sizeof hexval);
    for (int i = 0; i < 10; i++)
        hexval['0' + i] = (signed char)i;
    for (int i = 0; i < 6; i++) {
        hexval['a' + i] = (signed char)(10 + i);
        hexval['A' + i] = (signed char)(10 + i);
    }
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

/* A one-hot categorical field at p (empty, or 1..8 hex digits) ended by `end_of_field`: cat[at] its value,
 * valid[at] whether it is present. Returns p after the field's end, or NULL where the field is irregular. */
static const unsigned char *parse_hex_field(const unsigned char *p, unsigned char end_of_field, uint32_t *cat,
                                            uint8_t *valid, Py_ssize_t at) {
    const unsigned char *s = p;
    uint32_t x = 0;
    int d;
    while ((d = hexval[*p]) >= 0) {
        x = (x << 4) | (uint32_t)d;
        p++;
    }
    Py_ssize_t digits = p - s;
    if (digits > 8 || *p != end_of_field)
        return NULL;
    cat[at] = x;
    valid[at] = digits > 0;
    return p + 1;
}

/* parse_hex_field, first trying the usual field, 8 hex digits: eight independent lookups, one check (p[8] is in
 * the block, which ends at `end`). Used by _criteo.c; _lists.c calls parse_hex_field (this shortcut made its
 * one-hot-only rows ~5% slower, the plain loop keeps its code as it was). */
static inline const unsigned char *parse_hex_field_fast(const unsigned char *p, const unsigned char *end,
                                                        unsigned char end_of_field, uint32_t *cat, uint8_t *valid,
                                                        Py_ssize_t at) {
    if (end - p > 8 && p[8] == end_of_field) {
        int d0 = hexval[p[0]], d1 = hexval[p[1]], d2 = hexval[p[2]], d3 = hexval[p[3]];
        int d4 = hexval[p[4]], d5 = hexval[p[5]], d6 = hexval[p[6]], d7 = hexval[p[7]];
        if ((d0 | d1 | d2 | d3 | d4 | d5 | d6 | d7) >= 0) {
            cat[at] = (uint32_t)d0 << 28 | (uint32_t)d1 << 24 | (uint32_t)d2 << 20 | (uint32_t)d3 << 16 |
                      (uint32_t)d4 << 12 | (uint32_t)d5 << 8 | (uint32_t)d6 << 4 | (uint32_t)d7;
            valid[at] = 1;
            return p + 9;
        }
    }
    return parse_hex_field(p, end_of_field, cat, valid, at);
}

/* A row's 26 categorical fields at p (after its integers), through the row's '\n' (the last field's end; the block
 * ends at `end`), written for row r of n: each module's own (its fields' kinds), with its `ctx`. Returns p after
 * the row, or NULL where a field is irregular. */
typedef const unsigned char *(*parse_cats_fn)(const unsigned char *p, const unsigned char *end, Py_ssize_t n,
                                               Py_ssize_t r, void *ctx);

/* The rows of a block of n rows (each ended by '\n'): each row's label and integers (parse_label_and_ints), then its
 * categoricals (parse_cats). Returns n, or -1 where a row is irregular or the block holds another number of rows.
 * Inline, and called with a parse_cats known there: a direct call, or none where parse_cats is inlined. */
static inline Py_ssize_t parse_rows(const unsigned char *p, Py_ssize_t len, Py_ssize_t n, int8_t *label, float *num,
                                    int64_t *missing, parse_cats_fn parse_cats, void *ctx) {
    if (len == 0 || p[len - 1] != '\n')
        return -1;
    const unsigned char *end = p + len;
    Py_ssize_t r = 0;
    /* the block ends with '\n', which stops every scan below: no other bounds checks are needed */
    while (p < end) {
        if (r >= n)
            return -1;
        p = parse_label_and_ints(p, n, r, label, num, missing);
        if (!p)
            return -1;
        p = parse_cats(p, end, n, r, ctx);
        if (!p)
            return -1;
        r++;
    }
    return r == n ? r : -1;
}

#endif
