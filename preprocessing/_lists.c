/* Fast parse of one block of regular Criteo-layout TSV rows whose categoricals may be lists of values joined
 * by a one-byte separator (see preprocessing/fastparse.py, parse_list_block).
 *
 * A row is regular when it has exactly 40 tab-separated fields ended by LF: a label "0" or "1", 13 integers
 * (empty, or an optional '-' and 1..15 decimal digits, not a negative zero), then 26 categoricals, each
 *   - one-hot (kind 0): empty, or 1..8 hex digits (as preprocessing/_criteo.c);
 *   - a hex list (kind 1): empty (a missing list), or elements joined by its separator, each empty (a missing
 *     element) or 1..8 hex digits;
 *   - an int list (kind 2): likewise, each element empty or an optional '-' and 1..18 decimal digits.
 * A list with `keep` > 0 keeps its first `keep` elements (the rest are counted: `truncated`); a list with
 * `fixed` > 0 must keep exactly `fixed` elements or none. Anything else (a bad or odd row: spaces, "+1", CRLF,
 * quotes, 9 hex digits, a list of the wrong length) makes parse() return -1, and the caller parses the block
 * with the general (polars) path, which reports the problem as before.
 *
 * count_lines(block) -> the number of LF bytes (memchr: rows are long)
 * parse(block, kinds, seps, fixed, keep, label, num, cat, valid, missing, values, elem_valid, lengths,
 *       truncated, used) -> rows or -1 (n = count_lines(block))
 *   kinds, seps: bytes[26]; fixed, keep: int64[26]; label: int8[n]; num: float32[13*n]; cat: uint32[26*n];
 *   valid: uint8[26*n] (column-major as _criteo.c; only the one-hot columns are written); missing: int64[13];
 *   values, elem_valid, lengths, truncated: tuples with one buffer per list column (in column order):
 *   values uint32 (hex) or int64 (int), each as long as the column may need (too short: -1), elem_valid uint8
 *   (as long), lengths int64[n] (the elements kept per row), truncated uint8[n]; used: int64[26] gets each
 *   list column's number of elements written.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_criteo_row.h"

#define MAX_LISTS N_CAT


typedef struct {
    int kind;             /* 1 hex, 2 int */
    unsigned char sep;
    int64_t fixed, keep;
    void *values;         /* uint32_t * or int64_t * */
    uint8_t *elem_valid;
    Py_ssize_t cap, used;
    int64_t *lengths;
    uint8_t *truncated;
} List;

/* the elements of one list field at p (ended by `end_of_field`), or NULL where it is irregular */
static const unsigned char *parse_list(const unsigned char *p, unsigned char end_of_field, List *l, Py_ssize_t r) {
    int64_t count = 0, kept = 0;
    if (*p != end_of_field) {
        for (;;) {
            const unsigned char *s = p;
            int ok;
            uint64_t x = 0;
            if (l->kind == 1) {
                int d;
                while ((d = hexval[*p]) >= 0) {
                    x = (x << 4) | (uint64_t)d;
                    p++;
                }
                ok = p - s <= 8;
            } else {
                int neg = *p == '-';
                p += neg;
                const unsigned char *digits = p;
                while ((unsigned)(*p - '0') < 10) {
                    x = x * 10 + (uint64_t)(*p - '0');
                    p++;
                }
                ok = p - digits <= 18 && (!neg || p > digits);
                if (neg)
                    x = (uint64_t)(-(int64_t)x);
            }
            if (!ok)
                return NULL;
            if (l->keep == 0 || count < l->keep) {
                if (l->used >= l->cap)
                    return NULL;
                if (l->kind == 1)
                    ((uint32_t *)l->values)[l->used] = (uint32_t)x;
                else
                    ((int64_t *)l->values)[l->used] = (int64_t)x;
                l->elem_valid[l->used++] = p > s;
                kept++;
            }
            count++;
            if (*p == l->sep) {
                p++;
                continue;
            }
            if (*p != end_of_field)
                return NULL;
            break;
        }
    }
    if (l->fixed && kept != 0 && kept != l->fixed)
        return NULL;
    l->lengths[r] = kept;
    l->truncated[r] = l->keep && count > l->keep;
    return p;
}

/* where parse() writes a row's categoricals: each field's kind, the list columns, the one-hot ones (column-major) */
typedef struct {
    const unsigned char *kinds;
    List *lists;
    uint32_t *cat;
    uint8_t *valid;
} Fields;

/* a row's 26 categoricals, lists and one-hots (parse_rows' parse_cats) */
static const unsigned char *parse_fields(const unsigned char *p, const unsigned char *end, Py_ssize_t n,
                                         Py_ssize_t r, void *ctx) {
    (void)end;
    Fields *out = ctx;
    int k = 0;   /* the next list column */
    for (int j = 0; j < N_CAT; j++) {
        const unsigned char end_of_field = j == N_CAT - 1 ? '\n' : '\t';
        if (out->kinds[j]) {
            p = parse_list(p, end_of_field, &out->lists[k++], r);
            if (p == NULL)
                return NULL;
            p++;
            continue;
        }
        p = parse_hex_field(p, end_of_field, out->cat, out->valid, (Py_ssize_t)j * n + r);
        if (!p)
            return NULL;
    }
    return p;
}

#define MAX_BUFFERS (9 + 4 * MAX_LISTS)

typedef struct {
    Py_buffer b[MAX_BUFFERS];
    int n;
} Buffers;

static void release(Buffers *bs) {
    while (bs->n > 0)
        PyBuffer_Release(&bs->b[--bs->n]);
}

/* the next buffer of obj (at least `need` bytes), or NULL with an exception set */
static void *get(Buffers *bs, PyObject *obj, int writable, Py_ssize_t need, const char *what, Py_ssize_t *len) {
    Py_buffer *view = &bs->b[bs->n];
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    bs->n++;
    if (view->len < need) {
        PyErr_Format(PyExc_ValueError, "%s: buffer has %zd bytes, needs %zd", what, view->len, need);
        return NULL;
    }
    if (len)
        *len = view->len;
    return view->buf;
}

static PyObject *parse(PyObject *self, PyObject *args) {
    PyObject *o[15];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8],
                          &o[9], &o[10], &o[11], &o[12], &o[13], &o[14]))
        return NULL;
    Buffers bs = {.n = 0};
    List lists[MAX_LISTS];
    Py_ssize_t block_len, n, r = -2;
    const unsigned char *block = get(&bs, o[0], 0, 0, "block", &block_len);
    const unsigned char *kinds = block ? get(&bs, o[1], 0, N_CAT, "kinds", NULL) : NULL;
    const unsigned char *seps = kinds ? get(&bs, o[2], 0, N_CAT, "seps", NULL) : NULL;
    const int64_t *fixed = seps ? get(&bs, o[3], 0, N_CAT * 8, "fixed", NULL) : NULL;
    const int64_t *keep = fixed ? get(&bs, o[4], 0, N_CAT * 8, "keep", NULL) : NULL;
    int8_t *label = keep ? get(&bs, o[5], 1, 0, "label", &n) : NULL;
    float *num = label ? get(&bs, o[6], 1, n * N_INT * 4, "num", NULL) : NULL;
    uint32_t *cat = num ? get(&bs, o[7], 1, n * N_CAT * 4, "cat", NULL) : NULL;
    uint8_t *valid = cat ? get(&bs, o[8], 1, n * N_CAT, "valid", NULL) : NULL;
    int64_t *missing = valid ? get(&bs, o[9], 1, N_INT * 8, "missing", NULL) : NULL;
    int64_t *used = missing ? get(&bs, o[14], 1, N_CAT * 8, "used", NULL) : NULL;
    if (used == NULL)
        goto done;
    int nl = 0;
    for (int j = 0; j < N_CAT; j++) {
        if (kinds[j] == 0)
            continue;
        if (kinds[j] > 2) {
            PyErr_Format(PyExc_ValueError, "kinds[%d] is %d (0, 1 or 2 expected)", j, kinds[j]);
            goto done;
        }
        List *l = &lists[nl];
        l->kind = kinds[j];
        l->sep = seps[j];
        l->fixed = fixed[j];
        l->keep = keep[j];
        l->used = 0;
        PyObject *items[4];
        for (int t = 0; t < 4; t++) {
            if (!PyTuple_Check(o[10 + t]) || PyTuple_GET_SIZE(o[10 + t]) <= nl) {
                PyErr_SetString(PyExc_ValueError, "values, elem_valid, lengths, truncated: a tuple of one buffer "
                                "per list column");
                goto done;
            }
            items[t] = PyTuple_GET_ITEM(o[10 + t], nl);
        }
        Py_ssize_t vlen, elen;
        if (!(l->values = get(&bs, items[0], 1, 0, "values", &vlen)) ||
            !(l->elem_valid = get(&bs, items[1], 1, 0, "elem_valid", &elen)) ||
            !(l->lengths = get(&bs, items[2], 1, n * 8, "lengths", NULL)) ||
            !(l->truncated = get(&bs, items[3], 1, n, "truncated", NULL)))
            goto done;
        l->cap = vlen / (l->kind == 1 ? 4 : 8);
        if (elen < l->cap)
            l->cap = elen;
        nl++;
    }
    Fields out = {kinds, lists, cat, valid};
    Py_BEGIN_ALLOW_THREADS
    r = parse_rows(block, block_len, n, label, num, missing, parse_fields, &out);
    Py_END_ALLOW_THREADS
    for (int j = 0, k = 0; j < N_CAT; j++)
        used[j] = kinds[j] ? lists[k++].used : 0;
done:
    release(&bs);
    if (r == -2)
        return NULL;
    return PyLong_FromSsize_t(r);
}

static PyObject *count_lines(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n = 0;
    Py_BEGIN_ALLOW_THREADS
    const char *p = b.buf, *end = p + b.len, *q;
    while (p < end && (q = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        n++;
        p = q + 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    return PyLong_FromSsize_t(n);
}

static PyMethodDef methods[] = {
    {"count_lines", count_lines, METH_O, "count_lines(block) -> number of LF bytes"},
    {"parse", parse, METH_VARARGS,
     "parse(block, kinds, seps, fixed, keep, label, num, cat, valid, missing, values, elem_valid, lengths, "
     "truncated, used) -> rows, or -1 where a row is irregular (parse it another way)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lists",
                                    "Fast parse of regular Criteo-layout TSV blocks with list categoricals.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__lists(void) {
    fill_log1p_table();
    fill_hex_table();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
