/* Helpers shared by the op definitions: checked output shapes, constant inputs read as
 * integers, axis normalization, numpy broadcasting and the common parts of counts. */
#include "ops-private.h"

#include <string.h>

gboolean psim__out_set(PsimGraph *g, PsimNode *n, int32_t k, PsimDType dtype, int32_t rank,
                       const int64_t *dims, GError **error)
{
    if (rank > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "output %d has rank %d (at most %d supported)", k, rank,
                         PSIM__MAX_RANK);
        return FALSE;
    }
    int64_t known = 1;
    for (int32_t i = 0; i < rank; i++) {
        if (dims[i] == PSIM_DIM_UNKNOWN)
            continue;
        if (dims[i] < 0) {
            psim__error_node(error, g, n,
                             "output %d would have negative dimension %" G_GINT64_FORMAT, k,
                             dims[i]);
            return FALSE;
        }
        /* The product of the non-zero dims is bounded (a zero dim does not excuse an absurd
         * one), the rule placesim JSON applies, so that inferred shapes export and read back. */
        if (dims[i] == 0)
            continue;
        if (dims[i] > PSIM_MAX_ELEMENTS || known > PSIM_MAX_ELEMENTS / dims[i])
            known = PSIM_MAX_ELEMENTS + 1;
        else
            known *= dims[i];
        if (known > PSIM_MAX_ELEMENTS) {
            psim__error_node(error, g, n,
                             "output %d would have an absurd size (over 2^36 elements)", k);
            return FALSE;
        }
    }
    /* Keep what the file said where we know less: an unknown rank, unknown dims, a dtype. */
    const PsimOutput *old = k < n->n_outputs ? &n->outputs[k] : NULL;
    if (dtype == PSIM_DTYPE_UNDEFINED && old)
        dtype = old->dtype;
    if (rank < 0 && old && old->rank >= 0) {
        psim_graph_output_set(g, n, k, dtype, old->rank, old->dims);
        return TRUE;
    }
    int64_t merged[PSIM__MAX_RANK];
    if (rank > 0) {
        memcpy(merged, dims, sizeof(int64_t) * (size_t)rank);
        if (old && old->rank == rank && old->dims)
            for (int32_t i = 0; i < rank; i++)
                if (merged[i] == PSIM_DIM_UNKNOWN && old->dims[i] >= 0)
                    merged[i] = old->dims[i];
        /* The merge can make the product absurd even though each side alone was not. */
        int64_t m = 1;
        for (int32_t i = 0; i < rank && m <= PSIM_MAX_ELEMENTS; i++)
            if (merged[i] > 0)
                m = m > PSIM_MAX_ELEMENTS / merged[i] ? PSIM_MAX_ELEMENTS + 1 : m * merged[i];
        if (m > PSIM_MAX_ELEMENTS) {
            psim__error_node(error, g, n, "output %d: the declared and inferred shapes together "
                             "give over 2^36 elements", k);
            return FALSE;
        }
    }
    psim_graph_output_set(g, n, k, dtype, rank, rank > 0 ? merged : NULL);
    return TRUE;
}

void psim__out_unknown(PsimGraph *g, PsimNode *n, int32_t k, PsimDType dtype)
{
    (void)psim__out_set(g, n, k, dtype, PSIM_RANK_UNKNOWN, NULL, NULL);
}

const PsimOutput *psim__input_ranked(const PsimGraph *g, const PsimNode *n, int32_t k)
{
    const PsimOutput *o = psim__input(g, n, k);
    return o && o->rank >= 0 && (o->rank == 0 || o->dims) ? o : NULL;
}

PsimDType psim__input_dtype(const PsimGraph *g, const PsimNode *n, int32_t k)
{
    const PsimOutput *o = psim__input(g, n, k);
    return o ? o->dtype : PSIM_DTYPE_UNDEFINED;
}

const PsimTensor *psim__input_value(const PsimGraph *g, const PsimNode *n, int32_t k)
{
    const PsimOutput *o = psim__input(g, n, k);
    return o && o->value && o->value->data && o->value->device < 0 ? o->value : NULL;
}

static gboolean dtype_numeric(PsimDType t)
{
    return t != PSIM_DTYPE_UNDEFINED && t != PSIM_DTYPE_STRING && t != PSIM_DTYPE_COMPLEX64 &&
           t != PSIM_DTYPE_COMPLEX128 && t < PSIM_DTYPE_N_TYPES;
}

int32_t psim__input_ints(const PsimGraph *g, const PsimNode *n, int32_t k, int64_t *buf,
                         int32_t max, const char *what, GError **error)
{
    const PsimTensor *t = psim__input_value(g, n, k);
    if (!t)
        return -1;
    if (!dtype_numeric(t->dtype)) {
        psim__error_node(error, g, n, "input '%s' must be numeric, not %s", what,
                         psim_dtype_name(t->dtype));
        return -2;
    }
    if (t->n_elems > max) {
        psim__error_node(error, g, n, "input '%s' has %" G_GINT64_FORMAT " values (at most %d)",
                         what, t->n_elems, max);
        return -2;
    }
    for (int64_t i = 0; i < t->n_elems; i++)
        buf[i] = psim_tensor_get_i64(t, i);
    return (int32_t)t->n_elems;
}

/* Partial value of output `index` of node p (see psim__input_partial_ints); depth bounds the
 * walk. Returns the count or -1. */
static int32_t partial_of(const PsimGraph *g, const PsimNode *p, int32_t index, int64_t *buf,
                          int32_t max, int depth)
{
    if (index >= p->n_outputs || depth > 8)
        return -1;
    const PsimOutput *o = &p->outputs[index];
    if (o->value && o->value->data && o->value->device < 0 && dtype_numeric(o->value->dtype)) {
        if (o->value->n_elems > max || o->value->rank > 1)
            return -1;
        for (int64_t i = 0; i < o->value->n_elems; i++)
            buf[i] = psim_tensor_get_i64(o->value, i);
        return (int32_t)o->value->n_elems;
    }
    /* What the walk falls back on: the length from the inferred shape. */
    int32_t len = -1;
    if (o->rank == 0 && max >= 1)
        len = 1;
    else if (o->rank == 1 && o->dims && o->dims[0] >= 0 && o->dims[0] <= max)
        len = (int32_t)o->dims[0];
    const char *op = p->op;
    int32_t c = -1;
    if (index == 0 && !strcmp(op, "Shape")) {
        const PsimOutput *x = psim__input_ranked(g, p, 0);
        if (x) {
            int32_t s, e;
            psim__shape_range(p, x->rank, &s, &e);
            if (e - s <= max) {
                c = MAX(0, e - s);
                for (int32_t i = 0; i < c; i++)
                    buf[i] = x->dims[s + i] >= 0 ? x->dims[s + i] : PSIM__UNKNOWN_VALUE;
            }
        }
    } else if (index == 0 && (!strcmp(op, "Concat") || !strcmp(op, "Pack")) &&
               psim_node_attr_int(p, "axis", 0) == 0 && o->rank <= 1) {
        c = 0;
        for (int32_t k = 0; k < p->n_inputs && c >= 0; k++) {
            const PsimPort in = p->inputs[k];
            if (in.node < 0) {
                c = -1;
                break;
            }
            int32_t r =
                partial_of(g, psim_graph_node(g, in.node), in.index, buf + c, max - c, depth + 1);
            c = r < 0 ? -1 : c + r;
        }
    } else if (index == 0 &&
               (!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze") || !strcmp(op, "Reshape") ||
                !strcmp(op, "Cast") || !strcmp(op, "Identity") || !strcmp(op, "ExpandDims")) &&
               p->n_inputs >= 1 && p->inputs[0].node >= 0 && o->rank <= 1) {
        c = partial_of(g, psim_graph_node(g, p->inputs[0].node), p->inputs[0].index, buf, max,
                       depth + 1);
    } else if (index == 0 && !strcmp(op, "Gather") && p->n_inputs == 2 && p->inputs[0].node >= 0 &&
               o->rank <= 1) {
        int64_t src[PSIM__MAX_RANK];
        int32_t ns = partial_of(g, psim_graph_node(g, p->inputs[0].node), p->inputs[0].index, src,
                                PSIM__MAX_RANK, depth + 1);
        const PsimTensor *idx = psim__input_value(g, p, 1);
        if (ns >= 0 && idx && idx->n_elems <= max && dtype_numeric(idx->dtype)) {
            c = (int32_t)idx->n_elems;
            for (int32_t i = 0; i < c; i++) {
                int64_t j = psim_tensor_get_i64(idx, i);
                if (j < -ns || j >= ns) {
                    c = -1;
                    break;
                }
                buf[i] = src[j < 0 ? j + ns : j];
            }
        }
    } else if (index == 0 && !strcmp(op, "Slice") && p->n_inputs >= 3 && p->inputs[0].node >= 0 &&
               o->rank == 1) {
        int64_t src[PSIM__MAX_RANK];
        int32_t ns = partial_of(g, psim_graph_node(g, p->inputs[0].node), p->inputs[0].index, src,
                                PSIM__MAX_RANK, depth + 1);
        PsimSliceParams sp;
        gboolean axes_known;
        if (ns >= 0 && psim__slice_params(g, p, 1, &sp, &axes_known, NULL) == 1 && sp.n <= 1) {
            int64_t first = 0, step = 1, cnt = ns;
            if (sp.n == 1) {
                cnt = psim__slice_axis(ns, sp.starts[0], sp.ends[0], sp.steps[0], &first);
                step = sp.steps[0];
            }
            if (cnt <= max) {
                c = (int32_t)cnt;
                for (int32_t i = 0; i < c; i++)
                    buf[i] = src[first + i * step];
            }
        }
    }
    if (c >= 0 && (len < 0 || c == len))
        return c;
    if (len < 0)
        return -1;
    for (int32_t i = 0; i < len; i++)
        buf[i] = PSIM__UNKNOWN_VALUE;
    return len;
}

int32_t psim__input_partial_ints(const PsimGraph *g, const PsimNode *n, int32_t k, int64_t *buf,
                                 int32_t max, const char *what, GError **error)
{
    int32_t c = psim__input_ints(g, n, k, buf, max, what, error);
    if (c != -1)
        return c;
    const PsimOutput *o = psim__input(g, n, k);
    if (!o)
        return -1;
    return partial_of(g, psim_graph_node(g, n->inputs[k].node), n->inputs[k].index, buf, max, 0);
}

gboolean psim__axis(const PsimGraph *g, const PsimNode *n, int64_t axis, int32_t rank, int32_t *out,
                    GError **error)
{
    if (axis < -(int64_t)rank || axis >= rank) {
        psim__error_node(error, g, n, "axis %" G_GINT64_FORMAT " is out of range for rank %d", axis,
                         rank);
        return FALSE;
    }
    *out = (int32_t)(axis < 0 ? axis + rank : axis);
    return TRUE;
}

gboolean psim__broadcast(const PsimGraph *g, const PsimNode *n, int32_t ra, const int64_t *a,
                         int32_t rb, const int64_t *b, int32_t *rout, int64_t *out, GError **error)
{
    int32_t r = MAX(ra, rb);
    if (r > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "rank %d is too large", r);
        return FALSE;
    }
    for (int32_t i = 0; i < r; i++) {
        int32_t ia = i - (r - ra), ib = i - (r - rb);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        int64_t d;
        if (da == 1)
            d = db;
        else if (db == 1)
            d = da;
        else if (da == PSIM_DIM_UNKNOWN)
            d = db; /* db is unknown or > 1: a valid program has da == db (or da == 1) */
        else if (db == PSIM_DIM_UNKNOWN)
            d = da;
        else if (da == db)
            d = da;
        else {
            psim__error_node(error, g, n,
                             "shapes do not broadcast: dimension %d is %" G_GINT64_FORMAT
                             " in one input and %" G_GINT64_FORMAT " in another",
                             i, da, db);
            return FALSE;
        }
        /* 1 against unknown stays unknown (the unknown side may be 1 or more). */
        out[i] = d;
    }
    *rout = r;
    return TRUE;
}

int64_t psim__dims_prod(const int64_t *dims, int32_t from, int32_t to)
{
    int64_t p = 1;
    for (int32_t i = from; i < to; i++) {
        if (dims[i] < 0)
            return -1;
        if (dims[i] == 0)
            return 0;
    }
    for (int32_t i = from; i < to; i++) {
        if (p > PSIM_MAX_ELEMENTS / dims[i])
            return PSIM_MAX_ELEMENTS + 1;
        p *= dims[i];
    }
    return p;
}

int64_t psim__out_elems(const PsimNode *n, int32_t k)
{
    if (k >= n->n_outputs || n->outputs[k].rank < 0)
        return 0;
    int64_t e = psim_shape_elems(n->outputs[k].rank, n->outputs[k].dims);
    return e > 0 ? e : 0;
}

int64_t psim__in_elems(const PsimGraph *g, const PsimNode *n, int32_t k)
{
    const PsimOutput *o = psim__input_ranked(g, n, k);
    if (!o)
        return 0;
    int64_t e = psim_shape_elems(o->rank, o->dims);
    return e > 0 ? e : 0;
}

void psim__count_io(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    for (int32_t k = 0; k < n->n_inputs; k++) {
        const PsimOutput *o = psim__input(g, n, k);
        if (o)
            out->bytes_read += o->bytes;
    }
    for (int32_t k = 0; k < n->n_outputs; k++)
        out->bytes_written += n->outputs[k].bytes;
}

void psim__count_move(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    memset(out, 0, sizeof *out);
    psim__count_io(g, n, out);
}

PsimDType psim__attr_dtype(const PsimNode *n, const char *name, PsimDType dflt)
{
    const PsimAttr *a = psim_node_attr(n, name);
    if (!a)
        return dflt;
    int64_t v = a->type == PSIM_ATTR_DTYPE    ? (int64_t)a->v.dt
                : a->type == PSIM_ATTR_INT    ? a->v.i
                : a->type == PSIM_ATTR_STRING ? (int64_t)psim_dtype_from_name(a->v.s)
                                              : -1;
    return v > 0 && v < PSIM_DTYPE_N_TYPES ? (PsimDType)v : PSIM_DTYPE_UNDEFINED;
}

gboolean psim__infer_keep(PsimGraph *g, PsimNode *n, GError **error)
{
    (void)g;
    (void)n;
    (void)error;
    return TRUE;
}
