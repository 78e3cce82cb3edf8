/* Native hash tables for the vocabulary stages (see preprocessing/vocab.py, which falls back to numpy
 * where this module is not built). Keys are 4- or 8-byte integers compared bit for bit (signed columns
 * are passed as they are: equal values have equal bits). Every function releases the GIL.
 *
 * dict_encode(values, valid, codes, distinct[, expected]) -> k
 *   codes[i] = 1 + the rank of values[i] among the distinct values in order of first occurrence, or 0
 *   where valid[i] == 0 (valid: uint8 array or None); distinct[0:k] = those values. codes: uint32[n];
 *   distinct: the dtype of values, n long. ``expected`` (VERSION 4): about how many distinct values there are
 *   (0: unknown): the table starts at 4/3 of that, not twice n, and doubles past 3/4 full; a table that fits
 *   the cache codes a 2M-value block of 490k distinct values ~35 % faster.
 *
 * lookup(keys, vals, mul, shift, query, out)
 *   The probe of vocab.IntLookup's open-addressing table (linear probing, vals == 0 marks an empty slot,
 *   slot = (key * mul mod 2^bits_of_key) >> shift): out[i] = vals[slot of query[i]], 0 where absent.
 *   keys: uint32 or uint64 (query: the same width); vals and out: int32 or int64.
 *
 * gather(table, codes, out)   (VERSION 2; codes of 1 or 2 bytes: VERSION 3)
 *   out[i] = table[codes[i]]: a block's dictionary codes (uint8, uint16 or uint32) -> indices, written straight in
 *   the output dtype (table and out: items of one size, 1, 2, 4 or 8 bytes) without numpy's intp copy of the
 *   codes. ValueError where a code is not below len(table).
 *
 * bincount(codes, counts[, weights])   (VERSION 2; narrow codes and weights: VERSION 3)
 *   counts[codes[i]] += 1 (or += weights[i]: int64, as long as the codes) for uint8/uint16/uint32 codes (counts:
 *   int64, zeroed by the caller), without numpy's intp copy of the codes or its float64 weights. ValueError where
 *   a code is not below len(counts).
 *
 * sum_by_key(values, counts, out_values, out_counts[, threads]) -> k   (VERSION 5)
 *   The distinct values of ``values`` (a sequence of arrays read as one: chunks, not concatenated; 4- or 8-byte
 *   items) and the sums of their ``counts`` (a sequence of int64 arrays, each as long as its values'), in
 *   out_values[0:k] and out_counts[0:k] (as long as the input, not overlapping it), in no particular order (the
 *   same for the same input and any number of threads). Radix-partitioned by the values' hash (up to 256
 *   partitions of ~64k rows, each summed in a table that fits the cache, where one table of tens of millions of
 *   slots misses it at each probe); ``threads`` threads (default 1) count, scatter and sum at once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->itemsize != 1 && view->itemsize != 2 && view->itemsize != 4 && view->itemsize != 8) {
        PyErr_Format(PyExc_ValueError, "%s: items of %zd bytes (1, 2, 4 or 8 expected)", what, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static inline uint64_t mix64(uint64_t x) { return x * 0x9E3779B97F4A7C15ull; }

/* The table of dict_encode: 2^bits slots, each 0 (empty) or the code of distinct[code - 1]. Probes are
 * cache misses once the table outgrows the cache: the slot of the value PREFETCH_AHEAD places on is prefetched
 * (C21 of MLPerf-like rows, 2M values a block: -12 % with a cache-sized table, -32 % with one of twice the values;
 * a file's 5.4M mostly distinct count values: -10 %). */
#define PREFETCH_AHEAD 16
#define DICT_ENCODE(NAME, T)                                                                                  \
    static uint32_t *NAME##_table(const T *distinct, Py_ssize_t k, int bits) {                                 \
        size_t mask = ((size_t)1 << bits) - 1;                                                                \
        uint32_t *slot_code = calloc(mask + 1, sizeof(uint32_t));                                             \
        for (Py_ssize_t j = 0; slot_code && j < k; j++) {                                                     \
            size_t s = (size_t)(mix64((uint64_t)distinct[j]) >> (64 - bits));                                 \
            while (slot_code[s])                                                                              \
                s = (s + 1) & mask;                                                                           \
            slot_code[s] = (uint32_t)(j + 1);                                                                 \
        }                                                                                                     \
        return slot_code;                                                                                     \
    }                                                                                                         \
    static Py_ssize_t NAME(const T *v, const uint8_t *valid, Py_ssize_t n, uint32_t *codes, T *distinct,       \
                           Py_ssize_t expected) {                                                             \
        int bits = 4; /* at most half full for n values; at most 3/4 for the expected ones */               \
        if (expected > 0 && expected < n)                                                                     \
            while (((Py_ssize_t)1 << bits) / 4 * 3 <= expected)                                               \
                bits++;                                                                                       \
        else                                                                                                  \
            while (((Py_ssize_t)1 << bits) < 2 * n)                                                           \
                bits++;                                                                                       \
        size_t mask = ((size_t)1 << bits) - 1, grow_at = (mask + 1) / 4 * 3;                                  \
        uint32_t *slot_code = NAME##_table(distinct, 0, bits);                                                \
        if (!slot_code)                                                                                       \
            return -1;                                                                                        \
        Py_ssize_t k = 0;                                                                                     \
        for (Py_ssize_t i = 0; i < n; i++) {                                                                  \
            if (valid && !valid[i]) {                                                                         \
                codes[i] = 0;                                                                                 \
                continue;                                                                                     \
            }                                                                                                 \
            if (i + PREFETCH_AHEAD < n) /* the slot of a later value: its cache miss overlaps this probe */   \
                __builtin_prefetch(&slot_code[mix64((uint64_t)v[i + PREFETCH_AHEAD]) >> (64 - bits)]);        \
            T x = v[i];                                                                                       \
            size_t s = (size_t)(mix64((uint64_t)x) >> (64 - bits));                                           \
            for (;;) {                                                                                        \
                uint32_t c = slot_code[s];                                                                    \
                if (c == 0) {                                                                                 \
                    distinct[k++] = x;                                                                        \
                    slot_code[s] = (uint32_t)k;                                                               \
                    codes[i] = (uint32_t)k;                                                                   \
                    if ((size_t)k >= grow_at) { /* more distinct values than expected: a table twice as large */ \
                        free(slot_code);                                                                      \
                        bits++;                                                                               \
                        mask = mask * 2 + 1;                                                                  \
                        grow_at = (mask + 1) / 4 * 3;                                                         \
                        if (!(slot_code = NAME##_table(distinct, k, bits)))                                   \
                            return -1;                                                                        \
                    }                                                                                         \
                    break;                                                                                    \
                }                                                                                             \
                if (distinct[c - 1] == x) {                                                                   \
                    codes[i] = c;                                                                             \
                    break;                                                                                    \
                }                                                                                             \
                s = (s + 1) & mask;                                                                           \
            }                                                                                                 \
        }                                                                                                     \
        free(slot_code);                                                                                      \
        return k;                                                                                             \
    }

DICT_ENCODE(dict_encode32, uint32_t)
DICT_ENCODE(dict_encode64, uint64_t)

static PyObject *dict_encode(PyObject *self, PyObject *args) {
    PyObject *o_values, *o_valid, *o_codes, *o_distinct;
    Py_ssize_t expected = 0;
    if (!PyArg_ParseTuple(args, "OOOO|n", &o_values, &o_valid, &o_codes, &o_distinct, &expected))
        return NULL;
    Py_buffer bv, bm = {0}, bc, bd;
    if (get_buffer(o_values, &bv, 0, "values") < 0)
        return NULL;
    Py_ssize_t n = bv.len / bv.itemsize, k = -2;
    int has_valid = o_valid != Py_None;
    if (has_valid && get_buffer(o_valid, &bm, 0, "valid") < 0)
        goto release_values;
    if (get_buffer(o_codes, &bc, 1, "codes") < 0)
        goto release_valid;
    if (get_buffer(o_distinct, &bd, 1, "distinct") < 0)
        goto release_codes;
    if (bv.itemsize < 4 || bd.itemsize != bv.itemsize || bd.len < bv.len || bc.itemsize != 4 || bc.len < 4 * n ||
        (has_valid && (bm.itemsize != 1 || bm.len < n))) {
        PyErr_SetString(PyExc_ValueError, "dict_encode: values must have 4- or 8-byte items, codes be uint32[n], "
                                          "distinct as long as values and of their dtype, valid uint8[n] or None");
    } else {
        Py_BEGIN_ALLOW_THREADS
        if (bv.itemsize == 4)
            k = dict_encode32(bv.buf, has_valid ? bm.buf : NULL, n, bc.buf, bd.buf, expected);
        else
            k = dict_encode64(bv.buf, has_valid ? bm.buf : NULL, n, bc.buf, bd.buf, expected);
        Py_END_ALLOW_THREADS
        if (k == -1) {
            PyErr_NoMemory();
            k = -2;
        }
    }
    PyBuffer_Release(&bd);
release_codes:
    PyBuffer_Release(&bc);
release_valid:
    if (has_valid)
        PyBuffer_Release(&bm);
release_values:
    PyBuffer_Release(&bv);
    return k == -2 ? NULL : PyLong_FromSsize_t(k);
}

#define LOOKUP(NAME, K, V)                                                                                    \
    static void NAME(const K *keys, const V *vals, size_t mask, K mul, int shift, const K *q, Py_ssize_t n,      \
                     V *out) {                                                                                \
        for (Py_ssize_t i = 0; i < n; i++) {                                                                  \
            K x = q[i];                                                                                       \
            size_t s = (size_t)((K)(x * mul) >> shift);                                                       \
            V found = 0;                                                                                      \
            for (;;) {                                                                                        \
                V v = vals[s];                                                                                \
                if (v == 0)                                                                                   \
                    break;                                                                                    \
                if (keys[s] == x) {                                                                           \
                    found = v;                                                                                \
                    break;                                                                                    \
                }                                                                                             \
                s = (s + 1) & mask;                                                                           \
            }                                                                                                 \
            out[i] = found;                                                                                   \
        }                                                                                                     \
    }

LOOKUP(lookup32_32, uint32_t, int32_t)
LOOKUP(lookup32_64, uint32_t, int64_t)
LOOKUP(lookup64_32, uint64_t, int32_t)
LOOKUP(lookup64_64, uint64_t, int64_t)

static PyObject *lookup(PyObject *self, PyObject *args) {
    PyObject *o_keys, *o_vals, *o_query, *o_out;
    unsigned long long mul;
    int shift;
    if (!PyArg_ParseTuple(args, "OOKiOO", &o_keys, &o_vals, &mul, &shift, &o_query, &o_out))
        return NULL;
    Py_buffer bk, bv, bq, bo;
    int ok = 0;
    if (get_buffer(o_keys, &bk, 0, "keys") < 0)
        return NULL;
    if (get_buffer(o_vals, &bv, 0, "vals") == 0) {
        if (get_buffer(o_query, &bq, 0, "query") == 0) {
            if (get_buffer(o_out, &bo, 1, "out") == 0) {
                Py_ssize_t slots = bk.len / bk.itemsize, n = bq.len / bq.itemsize;
                if (bk.itemsize < 4 || bv.itemsize < 4 || bq.itemsize != bk.itemsize ||
                    bo.itemsize != bv.itemsize || bv.len / bv.itemsize != slots || bo.len / bo.itemsize < n ||
                    slots == 0 || (slots & (slots - 1)) || shift < 0 || shift >= 8 * bk.itemsize) {
                    PyErr_SetString(PyExc_ValueError, "lookup: a table of 2^k slots (uint32/uint64 keys, "
                                                      "int32/int64 values), a query of the keys' dtype, an output of "
                                                      "the values' dtype and as long as the query");
                } else {
                    size_t mask = (size_t)slots - 1;
                    Py_BEGIN_ALLOW_THREADS
                    if (bk.itemsize == 4 && bv.itemsize == 4)
                        lookup32_32(bk.buf, bv.buf, mask, (uint32_t)mul, shift, bq.buf, n, bo.buf);
                    else if (bk.itemsize == 4)
                        lookup32_64(bk.buf, bv.buf, mask, (uint32_t)mul, shift, bq.buf, n, bo.buf);
                    else if (bv.itemsize == 4)
                        lookup64_32(bk.buf, bv.buf, mask, (uint64_t)mul, shift, bq.buf, n, bo.buf);
                    else
                        lookup64_64(bk.buf, bv.buf, mask, (uint64_t)mul, shift, bq.buf, n, bo.buf);
                    Py_END_ALLOW_THREADS
                    ok = 1;
                }
                PyBuffer_Release(&bo);
            }
            PyBuffer_Release(&bq);
        }
        PyBuffer_Release(&bv);
    }
    PyBuffer_Release(&bk);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

#define GATHER(NAME, T, C)                                                                                    \
    static Py_ssize_t NAME(const T *table, Py_ssize_t m, const C *codes, Py_ssize_t n, T *out) {               \
        for (Py_ssize_t i = 0; i < n; i++) {                                                                  \
            C c = codes[i];                                                                                   \
            if ((Py_ssize_t)c >= m)                                                                           \
                return i;                                                                                     \
            out[i] = table[c];                                                                                \
        }                                                                                                     \
        return -1;                                                                                            \
    }
#define GATHERS(T, BITS)                                                                                      \
    GATHER(gather##BITS##_8, T, uint8_t)                                                                      \
    GATHER(gather##BITS##_16, T, uint16_t)                                                                    \
    GATHER(gather##BITS##_32, T, uint32_t)

GATHERS(uint8_t, 8)
GATHERS(uint16_t, 16)
GATHERS(uint32_t, 32)
GATHERS(uint64_t, 64)

/* code i of codes of ``size`` bytes (1, 2 or 4) */
static inline uint32_t code_at(const void *codes, int size, Py_ssize_t i) {
    return size == 1 ? ((const uint8_t *)codes)[i] : size == 2 ? ((const uint16_t *)codes)[i]
                                                               : ((const uint32_t *)codes)[i];
}

#define DISPATCH_CODES(PREFIX, CS, ...)                                                                       \
    ((CS) == 1 ? PREFIX##_8(__VA_ARGS__) : (CS) == 2 ? PREFIX##_16(__VA_ARGS__) : PREFIX##_32(__VA_ARGS__))

static PyObject *gather(PyObject *self, PyObject *args) {
    PyObject *o_table, *o_codes, *o_out;
    if (!PyArg_ParseTuple(args, "OOO", &o_table, &o_codes, &o_out))
        return NULL;
    Py_buffer bt, bc, bo;
    int ok = 0;
    if (get_buffer(o_table, &bt, 0, "table") < 0)
        return NULL;
    if (get_buffer(o_codes, &bc, 0, "codes") == 0) {
        if (get_buffer(o_out, &bo, 1, "out") == 0) {
            Py_ssize_t m = bt.len / bt.itemsize, n = bc.len / bc.itemsize;
            int cs = (int)bc.itemsize;
            if (cs == 8 || bo.itemsize != bt.itemsize || bo.len / bo.itemsize != n) {
                PyErr_SetString(PyExc_ValueError, "gather: uint8/uint16/uint32 codes, and a table and an output of "
                                                  "one item size (the output as long as the codes)");
            } else {
                Py_ssize_t bad;
                Py_BEGIN_ALLOW_THREADS
                if (bt.itemsize == 1)
                    bad = DISPATCH_CODES(gather8, cs, bt.buf, m, bc.buf, n, bo.buf);
                else if (bt.itemsize == 2)
                    bad = DISPATCH_CODES(gather16, cs, bt.buf, m, bc.buf, n, bo.buf);
                else if (bt.itemsize == 4)
                    bad = DISPATCH_CODES(gather32, cs, bt.buf, m, bc.buf, n, bo.buf);
                else
                    bad = DISPATCH_CODES(gather64, cs, bt.buf, m, bc.buf, n, bo.buf);
                Py_END_ALLOW_THREADS
                if (bad >= 0)
                    PyErr_Format(PyExc_ValueError, "gather: code %u at %zd is not below the table's %zd entries",
                                 code_at(bc.buf, cs, bad), bad, m);
                else
                    ok = 1;
            }
            PyBuffer_Release(&bo);
        }
        PyBuffer_Release(&bc);
    }
    PyBuffer_Release(&bt);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

#define BINCOUNT(NAME, C)                                                                                     \
    static Py_ssize_t NAME(const C *codes, Py_ssize_t n, const int64_t *weights, int64_t *counts, Py_ssize_t m) { \
        for (Py_ssize_t i = 0; i < n; i++) {                                                                  \
            C c = codes[i];                                                                                   \
            if ((Py_ssize_t)c >= m)                                                                           \
                return i;                                                                                     \
            counts[c] += weights ? weights[i] : 1;                                                            \
        }                                                                                                     \
        return -1;                                                                                            \
    }

BINCOUNT(bincount_8, uint8_t)
BINCOUNT(bincount_16, uint16_t)
BINCOUNT(bincount_32, uint32_t)

static PyObject *bincount(PyObject *self, PyObject *args) {
    PyObject *o_codes, *o_counts, *o_weights = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O", &o_codes, &o_counts, &o_weights))
        return NULL;
    Py_buffer bc, bn, bw = {0};
    int ok = 0, has_weights = o_weights != Py_None;
    if (get_buffer(o_codes, &bc, 0, "codes") < 0)
        return NULL;
    if (get_buffer(o_counts, &bn, 1, "counts") == 0) {
        if (!has_weights || get_buffer(o_weights, &bw, 0, "weights") == 0) {
            int cs = (int)bc.itemsize;
            Py_ssize_t n = bc.len / cs, m = bn.len / 8, bad = -1;
            if (cs == 8 || bn.itemsize != 8 || (has_weights && (bw.itemsize != 8 || bw.len / 8 != n))) {
                PyErr_SetString(PyExc_ValueError, "bincount: uint8/uint16/uint32 codes, int64 counts and int64 "
                                                  "weights as long as the codes (or None)");
            } else {
                Py_BEGIN_ALLOW_THREADS
                bad = DISPATCH_CODES(bincount, cs, bc.buf, n, has_weights ? bw.buf : NULL, bn.buf, m);
                Py_END_ALLOW_THREADS
                if (bad >= 0)
                    PyErr_Format(PyExc_ValueError, "bincount: code %u at %zd is not below the counts' %zd entries",
                                 code_at(bc.buf, cs, bad), bad, m);
                else
                    ok = 1;
            }
            if (has_weights)
                PyBuffer_Release(&bw);
        }
        PyBuffer_Release(&bn);
    }
    PyBuffer_Release(&bc);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}


/* sum_by_key: a row's partition is the top `pbits` bits of its hash, its slot in the partition's table the bits
 * below them. Three phases, each over `threads` threads: count each thread's rows per partition, scatter them to
 * their partitions (each thread's rows after the earlier threads', so the order does not depend on the threads),
 * sum each partition in place (its distinct values at its start). */
#define MAX_PART_BITS 8
#define PART_ROWS 65536
#define MAX_SUM_THREADS 64

typedef struct {
    const void **v;             /* the input's chunks: values and counts, rows [first[ch], first[ch + 1]) */
    const int64_t **c;
    Py_ssize_t *first, chunks;
    void *pv;                   /* the rows by partition (the outputs); summed: each partition's distinct first */
    int64_t *pc;
    Py_ssize_t n, *hist;        /* hist[t * parts + p]: thread t's rows of partition p, then where the next goes */
    Py_ssize_t start[(1 << MAX_PART_BITS) + 1], distinct[1 << MAX_PART_BITS];
    int threads, pbits, width, phase;
} SumTask;

typedef struct {
    SumTask *task;
    int t, failed;
} SumPart;

/* Calls BODY for each row i in [lo, hi) of the chunked input, with x its value and w its count. */
#define EACH_ROW(T, k, lo, hi, BODY)                                                                          \
    for (Py_ssize_t ch = 0; ch < (k)->chunks; ch++) {                                                         \
        Py_ssize_t a = (k)->first[ch] > (lo) ? (k)->first[ch] : (lo);                                         \
        Py_ssize_t b = (k)->first[ch + 1] < (hi) ? (k)->first[ch + 1] : (hi);                                 \
        const T *xs = (const T *)(k)->v[ch];                                                                  \
        const int64_t *ws = (k)->c[ch];                                                                       \
        for (Py_ssize_t i = a - (k)->first[ch]; i < b - (k)->first[ch]; i++) {                                \
            T x = xs[i];                                                                                      \
            int64_t w = ws[i];                                                                                \
            (void)w;                                                                                          \
            BODY                                                                                              \
        }                                                                                                     \
    }

#define SUM_BY_KEY(NAME, T)                                                                                   \
    static void NAME##_count(SumTask *k, int t, Py_ssize_t lo, Py_ssize_t hi) {                                \
        Py_ssize_t *h = k->hist + ((Py_ssize_t)t << k->pbits);                                                \
        EACH_ROW(T, k, lo, hi, h[k->pbits ? mix64((uint64_t)x) >> (64 - k->pbits) : 0]++;)                   \
    }                                                                                                         \
    static void NAME##_scatter(SumTask *k, int t, Py_ssize_t lo, Py_ssize_t hi) {                              \
        T *pv = k->pv;                                                                                        \
        Py_ssize_t *h = k->hist + ((Py_ssize_t)t << k->pbits);                                                \
        EACH_ROW(T, k, lo, hi, {                                                                              \
            Py_ssize_t at = h[k->pbits ? mix64((uint64_t)x) >> (64 - k->pbits) : 0]++;                        \
            pv[at] = x;                                                                                       \
            k->pc[at] = w;                                                                                    \
        })                                                                                                    \
    }                                                                                                         \
    static int NAME##_sum(SumTask *k, int t) {                                                                \
        Py_ssize_t parts = (Py_ssize_t)1 << k->pbits, largest = 0;                                            \
        for (Py_ssize_t p = t; p < parts; p += k->threads)                                                    \
            if (k->start[p + 1] - k->start[p] > largest)                                                      \
                largest = k->start[p + 1] - k->start[p];                                                      \
        int bits = 4;                                                                                         \
        while (((Py_ssize_t)1 << bits) < 2 * largest)                                                         \
            bits++;                                                                                           \
        uint32_t *slot = malloc(sizeof(uint32_t) << bits);                                                    \
        if (!slot)                                                                                            \
            return -1;                                                                                        \
        for (Py_ssize_t p = t; p < parts; p += k->threads) {                                                  \
            Py_ssize_t n = k->start[p + 1] - k->start[p], d = 0;                                              \
            int b = 4;                                                                                        \
            while (((Py_ssize_t)1 << b) < 2 * n)                                                              \
                b++;                                                                                          \
            size_t mask = ((size_t)1 << b) - 1;                                                               \
            memset(slot, 0, sizeof(uint32_t) << b);                                                           \
            T *x = (T *)k->pv + k->start[p];                                                                  \
            int64_t *w = k->pc + k->start[p];                                                                 \
            for (Py_ssize_t i = 0; i < n; i++) {                                                              \
                T key = x[i];                                                                                 \
                int64_t add = w[i];                                                                           \
                size_t s = (size_t)((mix64((uint64_t)key) << k->pbits) >> (64 - b));                          \
                for (;;) {                                                                                    \
                    uint32_t at = slot[s];                                                                    \
                    if (at == 0) { /* a new value: written at d <= i, over a row already read */              \
                        x[d] = key;                                                                           \
                        w[d] = add;                                                                           \
                        slot[s] = (uint32_t)++d;                                                              \
                        break;                                                                                \
                    }                                                                                         \
                    if (x[at - 1] == key) {                                                                   \
                        w[at - 1] += add;                                                                     \
                        break;                                                                                \
                    }                                                                                         \
                    s = (s + 1) & mask;                                                                       \
                }                                                                                             \
            }                                                                                                 \
            k->distinct[p] = d;                                                                               \
        }                                                                                                     \
        free(slot);                                                                                           \
        return 0;                                                                                             \
    }

SUM_BY_KEY(sum32, uint32_t)
SUM_BY_KEY(sum64, uint64_t)

static void *sum_phase(void *arg) {
    SumPart *part = arg;
    SumTask *k = part->task;
    int t = part->t;
    Py_ssize_t lo = k->n * t / k->threads, hi = k->n * (t + 1) / k->threads;
    if (k->phase == 0)
        (k->width == 4 ? sum32_count : sum64_count)(k, t, lo, hi);
    else if (k->phase == 1)
        (k->width == 4 ? sum32_scatter : sum64_scatter)(k, t, lo, hi);
    else
        part->failed = (k->width == 4 ? sum32_sum : sum64_sum)(k, t);
    return NULL;
}

/* One phase on every thread (the calling one included); -1 where a thread could not start or run. */
static int run_phase(SumTask *k, int phase) {
    SumPart parts[MAX_SUM_THREADS];
    pthread_t ids[MAX_SUM_THREADS];
    int started = 1, failed = 0;
    k->phase = phase;
    for (int t = 0; t < k->threads; t++)
        parts[t] = (SumPart){.task = k, .t = t, .failed = 0};
    for (int t = 1; t < k->threads; t++, started++)
        if (pthread_create(&ids[t], NULL, sum_phase, &parts[t]) != 0)
            break;
    for (int t = started; t < k->threads; t++)   /* threads that could not start: run here */
        sum_phase(&parts[t]);
    sum_phase(&parts[0]);
    for (int t = 1; t < started; t++)
        pthread_join(ids[t], NULL);
    for (int t = 0; t < k->threads; t++)
        failed |= parts[t].failed;
    return failed ? -1 : 0;
}

/* The rows are scattered into the outputs, summed there by partition and moved up to the front. */
static Py_ssize_t sum_by_key_rows(SumTask *k, void *out_v, int64_t *out_c) {
    Py_ssize_t parts = (Py_ssize_t)1 << k->pbits;
    k->hist = calloc((size_t)(k->threads * parts), sizeof(Py_ssize_t));
    if (!k->hist)
        return -1;
    k->pv = out_v;
    k->pc = out_c;
    run_phase(k, 0);
    Py_ssize_t at = 0;
    for (Py_ssize_t p = 0; p < parts; p++) {   /* partition p's rows: thread 0's, then thread 1's, ... */
        k->start[p] = at;
        for (int t = 0; t < k->threads; t++) {
            Py_ssize_t rows = k->hist[t * parts + p];
            k->hist[t * parts + p] = at;
            at += rows;
        }
    }
    k->start[parts] = at;
    run_phase(k, 1);
    free(k->hist);
    if (run_phase(k, 2) < 0)
        return -1;
    Py_ssize_t total = 0;
    for (Py_ssize_t p = 0; p < parts; p++) {   /* total <= start[p]: each move goes up or stays */
        memmove((char *)out_v + total * k->width, (char *)out_v + k->start[p] * k->width,
                (size_t)k->distinct[p] * k->width);
        memmove(out_c + total, out_c + k->start[p], (size_t)k->distinct[p] * sizeof(int64_t));
        total += k->distinct[p];
    }
    return total;
}

static PyObject *sum_by_key(PyObject *self, PyObject *args) {
    PyObject *o_values, *o_counts, *o_out_values, *o_out_counts, *fv = NULL, *fc = NULL;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "OOOO|i", &o_values, &o_counts, &o_out_values, &o_out_counts, &threads))
        return NULL;
    Py_ssize_t chunks = 0, got = 0, total = -2;
    Py_buffer *bufs = NULL, bov, boc;
    SumTask k = {.pbits = 0};
    if (!(fv = PySequence_Fast(o_values, "sum_by_key: values must be a sequence of arrays")) ||
        !(fc = PySequence_Fast(o_counts, "sum_by_key: counts must be a sequence of arrays")))
        goto done;
    chunks = PySequence_Fast_GET_SIZE(fv);
    if (PySequence_Fast_GET_SIZE(fc) != chunks || threads < 1) {
        PyErr_SetString(PyExc_ValueError, "sum_by_key: as many value arrays as count arrays, threads >= 1");
        goto done;
    }
    bufs = PyMem_Calloc(2 * chunks + 1, sizeof(Py_buffer));
    k.v = PyMem_Calloc(chunks + 1, sizeof(void *));
    k.c = PyMem_Calloc(chunks + 1, sizeof(int64_t *));
    k.first = PyMem_Calloc(chunks + 1, sizeof(Py_ssize_t));
    if (!bufs || !k.v || !k.c || !k.first) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < 2 * chunks; got++) {
        PyObject *o = (got % 2 ? PySequence_Fast_ITEMS(fc) : PySequence_Fast_ITEMS(fv))[got / 2];
        if (get_buffer(o, &bufs[got], 0, got % 2 ? "counts" : "values") < 0)
            goto done;
    }
    for (Py_ssize_t ch = 0; ch < chunks; ch++) {
        Py_buffer *bv = &bufs[2 * ch], *bc = &bufs[2 * ch + 1];
        Py_ssize_t n = bv->len / bv->itemsize;
        if (bv->itemsize < 4 || (ch && bv->itemsize != k.width) || bc->itemsize != 8 || bc->len != 8 * n) {
            PyErr_SetString(PyExc_ValueError, "sum_by_key: value arrays of one item size, 4 or 8 bytes, each with "
                                              "an int64 count array as long");
            goto done;
        }
        k.width = (int)bv->itemsize;
        k.v[ch] = bv->buf;
        k.c[ch] = bc->buf;
        k.first[ch + 1] = k.first[ch] + n;
    }
    k.chunks = chunks;
    k.n = k.first[chunks];
    if (get_buffer(o_out_values, &bov, 1, "out_values") < 0)
        goto done;
    if (get_buffer(o_out_counts, &boc, 1, "out_counts") == 0) {
        if ((chunks && bov.itemsize != k.width) || bov.len / bov.itemsize < k.n || boc.itemsize != 8 ||
            boc.len < 8 * k.n) {
            PyErr_SetString(PyExc_ValueError, "sum_by_key: outputs of the values' dtype and int64, as long as the "
                                              "values' arrays together");
        } else if (k.n == 0) {
            total = 0;
        } else {
            while (k.pbits < MAX_PART_BITS && ((Py_ssize_t)PART_ROWS << k.pbits) < k.n)
                k.pbits++;
            k.threads = threads > MAX_SUM_THREADS ? MAX_SUM_THREADS : threads;
            if (k.n < (Py_ssize_t)k.threads * PART_ROWS)   /* small: threads cost more than they save */
                k.threads = 1;
            Py_BEGIN_ALLOW_THREADS
            total = sum_by_key_rows(&k, bov.buf, boc.buf);
            Py_END_ALLOW_THREADS
            if (total == -1) {
                PyErr_NoMemory();
                total = -2;
            }
        }
        PyBuffer_Release(&boc);
    }
    PyBuffer_Release(&bov);
done:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&bufs[i]);
    PyMem_Free(bufs);
    PyMem_Free((void *)k.v);
    PyMem_Free((void *)k.c);
    PyMem_Free(k.first);
    Py_XDECREF(fv);
    Py_XDECREF(fc);
    return total == -2 ? NULL : PyLong_FromSsize_t(total);
}

static PyMethodDef methods[] = {
    {"dict_encode", dict_encode, METH_VARARGS,
     "dict_encode(values, valid, codes, distinct[, expected]) -> k: codes 1..k of first occurrence (0: not valid)"},
    {"lookup", lookup, METH_VARARGS, "lookup(keys, vals, mul, shift, query, out): probe vocab.IntLookup's table"},
    {"gather", gather, METH_VARARGS, "gather(table, codes, out): out[i] = table[codes[i]] (uint8/16/32 codes)"},
    {"sum_by_key", sum_by_key, METH_VARARGS,
     "sum_by_key(values, counts, out_values, out_counts[, threads]) -> k: distinct values and their summed counts"},
    {"bincount", bincount, METH_VARARGS, "bincount(codes, counts[, weights]): counts[codes[i]] += 1 or weights[i] (uint8/16/32 codes, int64)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_vocab", "Native hash tables for the vocabulary stages.",
                                    -1, methods};

PyMODINIT_FUNC PyInit__vocab(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", 5) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
