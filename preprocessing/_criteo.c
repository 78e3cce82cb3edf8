/* Fast parse of one block of regular Criteo TSV rows (see preprocessing/fastparse.py).
 *
 * A row is regular when it has exactly 40 tab-separated fields ended by LF: a label "0" or "1",
 * 13 integers (empty, or an optional '-' and 1..15 decimal digits, not a negative zero) and 26
 * categoricals (empty, or 1..8 hex digits). Anything else makes parse() return -1, and the caller
 * parses the block with the general (polars) path, which reports the problem.
 *
 * parse(block, label[int8, n], num[float32, 13*n], cat[uint32, 26*n], valid[uint8, 26*n], missing[int64, 13])
 *   -> rows or -1
 *   num, cat and valid are column-major (column j holds rows [j*n, (j+1)*n)); n = count_lines(block).
 *   num = (float)log1p(max(x, 0)), 0 where missing (as the polars path: Float64 -> clip -> log1p -> Float32);
 *   missing[j] counts the empty fields of integer column j (the data gate's missing share, which the 0s hide).
 * The module's VERSION is 2 (1: parse without `missing`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_criteo_row.h"



static int get_buffer(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t need, const char *what) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (need >= 0 && view->len < need) {
        PyErr_Format(PyExc_ValueError, "%s: buffer has %zd bytes, needs %zd", what, view->len, need);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static Py_ssize_t count_nl(const char *p, Py_ssize_t len) {
    Py_ssize_t n = 0;
    const char *end = p + len;
    while (p < end) {
        const char *q = memchr(p, '\n', (size_t)(end - p));
        if (!q)
            break;
        n++;
        p = q + 1;
    }
    return n;
}

static PyObject *count_lines(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (get_buffer(arg, &b, 0, -1, "block") < 0)
        return NULL;
    Py_ssize_t n;
    Py_BEGIN_ALLOW_THREADS
    n = count_nl((const char *)b.buf, b.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    return PyLong_FromSsize_t(n);
}


/* where parse() writes a row's one-hot categoricals (column-major) */
typedef struct {
    uint32_t *cat;
    uint8_t *valid;
} OneHot;

/* a row's 26 one-hot categoricals (parse_rows' parse_cats; always inlined: parse() compiles as when its loop
 * was written out here) */
static inline __attribute__((always_inline)) const unsigned char *parse_one_hots(
    const unsigned char *p, const unsigned char *end, Py_ssize_t n, Py_ssize_t r, void *ctx) {
    OneHot *out = ctx;
    for (int j = 0; j < N_CAT; j++) {
        p = parse_hex_field_fast(p, end, j == N_CAT - 1 ? '\n' : '\t', out->cat, out->valid, (Py_ssize_t)j * n + r);
        if (!p)
            return NULL;
    }
    return p;
}

static PyObject *parse(PyObject *self, PyObject *args) {
    PyObject *o_block, *o_label, *o_num, *o_cat, *o_valid, *o_missing;
    if (!PyArg_ParseTuple(args, "OOOOOO", &o_block, &o_label, &o_num, &o_cat, &o_valid, &o_missing))
        return NULL;
    Py_buffer b, bl, bn, bc, bv, bm;
    if (get_buffer(o_block, &b, 0, -1, "block") < 0)
        return NULL;
    if (get_buffer(o_label, &bl, 1, -1, "label") < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    Py_ssize_t n = bl.len;
    Py_ssize_t r = -2;
    if (get_buffer(o_num, &bn, 1, n * N_INT * 4, "num") == 0) {
        if (get_buffer(o_cat, &bc, 1, n * N_CAT * 4, "cat") == 0) {
            if (get_buffer(o_valid, &bv, 1, n * N_CAT, "valid") == 0) {
                if (get_buffer(o_missing, &bm, 1, N_INT * 8, "missing") == 0) {
                    OneHot out = {(uint32_t *)bc.buf, (uint8_t *)bv.buf};
                    Py_BEGIN_ALLOW_THREADS
                    r = parse_rows((const unsigned char *)b.buf, b.len, n, (int8_t *)bl.buf, (float *)bn.buf,
                                   (int64_t *)bm.buf, parse_one_hots, &out);
                    Py_END_ALLOW_THREADS
                    PyBuffer_Release(&bm);
                }
                PyBuffer_Release(&bv);
            }
            PyBuffer_Release(&bc);
        }
        PyBuffer_Release(&bn);
    }
    PyBuffer_Release(&bl);
    PyBuffer_Release(&b);
    if (r == -2)
        return NULL;
    return PyLong_FromSsize_t(r);
}

static PyMethodDef methods[] = {
    {"count_lines", count_lines, METH_O, "count_lines(block) -> number of LF bytes"},
    {"parse", parse, METH_VARARGS,
     "parse(block, label, num, cat, valid, missing) -> rows, or -1 where a row is irregular (parse it another way)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_criteo", "Fast parse of regular Criteo TSV blocks.",
                                    -1, methods};

PyMODINIT_FUNC PyInit__criteo(void) {
    fill_log1p_table();
    fill_hex_table();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", 2) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
