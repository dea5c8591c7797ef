/* Shape-manipulating ops with ONNX semantics (opsets 7..17): Concat, Split, Slice, Pad,
 * Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Expand, Tile, Gather, Shape, Size and
 * ConstantOfShape. Parameters that moved from attributes to inputs across opsets are read from
 * whichever the node has; inputs are read from their constant values when known. */
#include "ops-private.h"

#include <string.h>

static gboolean need_input(const PsimGraph *g, const PsimNode *n, int32_t k, GError **error)
{
    if (psim__input(g, n, k))
        return TRUE;
    psim__error_node(error, g, n, "%s needs input %d", n->op, k);
    return FALSE;
}

/* All dims unknown at a given rank. */
static gboolean out_rank_only(PsimGraph *g, PsimNode *n, int32_t k, PsimDType dt, int32_t rank,
                              GError **error)
{
    int64_t d[PSIM__MAX_RANK];
    if (rank > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "rank %d is too large", rank);
        return FALSE;
    }
    for (int32_t i = 0; i < rank; i++)
        d[i] = PSIM_DIM_UNKNOWN;
    return psim__out_set(g, n, k, dt, rank, d, error);
}

/* An int list from an attr (older opsets) or an input (newer). Returns the count, -1 when
 * neither is known (an input computed at run time), -2 on error, -3 when both are absent. */
static int32_t attr_or_input(const PsimGraph *g, const PsimNode *n, const char *attr, int32_t k,
                             int64_t *buf, int32_t max, GError **error)
{
    const int64_t *v;
    int32_t c = psim_node_attr_ints(n, attr, &v);
    if (c >= 0) {
        if (c > max) {
            psim__error_node(error, g, n, "attr '%s' has %d values (at most %d)", attr, c, max);
            return -2;
        }
        memcpy(buf, v, sizeof(int64_t) * (size_t)c);
        return c;
    }
    if (!psim__input(g, n, k))
        return -3;
    return psim__input_ints(g, n, k, buf, max, attr, error);
}

/* ---- Concat ---- */

static gboolean infer_concat(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    PsimDType dt = psim__input_dtype(g, n, 0);
    const PsimAttr *axa = psim_node_attr(n, "axis");
    if (!axa) {
        psim__error_node(error, g, n, "Concat needs an 'axis' attribute");
        return FALSE;
    }
    int32_t rank = -1;
    for (int32_t k = 0; k < n->n_inputs; k++) {
        const PsimOutput *in = psim__input_ranked(g, n, k);
        if (!in)
            continue;
        if (rank >= 0 && in->rank != rank) {
            psim__error_node(error, g, n, "Concat inputs have different ranks (%d and %d)", rank,
                             in->rank);
            return FALSE;
        }
        rank = in->rank;
    }
    if (rank < 0) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    int32_t axis;
    if (rank > PSIM__MAX_RANK ||
        !psim__axis(g, n, psim_node_attr_int(n, "axis", 0), rank, &axis, error)) {
        if (rank > PSIM__MAX_RANK)
            psim__error_node(error, g, n, "rank %d is too large", rank);
        return FALSE;
    }
    int64_t out[PSIM__MAX_RANK];
    for (int32_t i = 0; i < rank; i++)
        out[i] = PSIM_DIM_UNKNOWN;
    int64_t sum = 0;
    gboolean sum_known = TRUE;
    for (int32_t k = 0; k < n->n_inputs; k++) {
        if (n->inputs[k].node < 0)
            continue;
        const PsimOutput *in = psim__input_ranked(g, n, k);
        if (!in) {
            sum_known = FALSE;
            continue;
        }
        for (int32_t i = 0; i < rank; i++) {
            if (i == axis)
                continue;
            if (in->dims[i] >= 0 && out[i] >= 0 && in->dims[i] != out[i]) {
                psim__error_node(error, g, n,
                                 "Concat inputs differ in dimension %d (%" G_GINT64_FORMAT
                                 " vs %" G_GINT64_FORMAT ")",
                                 i, out[i], in->dims[i]);
                return FALSE;
            }
            if (in->dims[i] >= 0)
                out[i] = in->dims[i];
        }
        if (in->dims[axis] < 0)
            sum_known = FALSE;
        else
            sum += in->dims[axis];
        if (sum > PSIM_MAX_ELEMENTS)
            sum = PSIM_MAX_ELEMENTS + 1;
    }
    out[axis] = sum_known ? sum : PSIM_DIM_UNKNOWN;
    return psim__out_set(g, n, 0, dt, rank, out, error);
}

/* ---- Split ---- */

static int32_t split_n_outputs(const PsimNode *n)
{
    const int64_t *v;
    int32_t c = psim_node_attr_ints(n, "split", &v);
    if (c > 0)
        return MIN(c, 4096);
    int64_t k = psim_node_attr_int(n, "num_outputs", psim_node_attr_int(n, "num_split", 1));
    return (int32_t)CLAMP(k, 1, 4096);
}

static gboolean infer_split(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    int32_t no = n->n_outputs;
    if (no < 1) {
        psim__error_node(error, g, n, "Split has no outputs");
        return FALSE;
    }
    if (!x) {
        for (int32_t k = 0; k < no; k++)
            psim__out_unknown(g, n, k, dt);
        return TRUE;
    }
    int32_t axis;
    if (x->rank > PSIM__MAX_RANK ||
        !psim__axis(g, n, psim_node_attr_int(n, "axis", 0), x->rank, &axis, error)) {
        if (x->rank > PSIM__MAX_RANK)
            psim__error_node(error, g, n, "rank %d is too large", x->rank);
        return FALSE;
    }
    int64_t *split = g_new(int64_t, (gsize)no + 1);
    int32_t ns = attr_or_input(g, n, "split", 1, split, no + 1, error);
    gboolean ok = FALSE;
    int64_t dim = x->dims[axis];
    int64_t d[PSIM__MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    if (ns == -2)
        goto out;
    if (ns >= 0) {
        if (ns != no) {
            psim__error_node(error, g, n, "split has %d sizes for %d outputs", ns, no);
            goto out;
        }
        int64_t sum = 0;
        for (int32_t k = 0; k < no; k++) {
            if (split[k] < 0 || split[k] > PSIM_MAX_ELEMENTS) {
                psim__error_node(error, g, n, "split size %" G_GINT64_FORMAT " is invalid",
                                 split[k]);
                goto out;
            }
            sum += split[k];
        }
        if (dim >= 0 && sum != dim) {
            psim__error_node(error, g, n,
                             "split sizes add up to %" G_GINT64_FORMAT
                             ", the axis has %" G_GINT64_FORMAT,
                             sum, dim);
            goto out;
        }
    } else if (ns == -1 || dim < 0) {
        for (int32_t k = 0; k < no; k++)
            split[k] = PSIM_DIM_UNKNOWN;
    } else if (psim_node_attr(n, "num_outputs")) {
        /* Opset 18: equal chunks of ceil(dim / n), the last one smaller. */
        int64_t chunk = (dim + no - 1) / no;
        for (int32_t k = 0; k < no; k++)
            split[k] = MAX(0, MIN(chunk, dim - chunk * k));
    } else {
        if (dim % no) {
            psim__error_node(error, g, n,
                             "axis of %" G_GINT64_FORMAT " does not split evenly into %d outputs",
                             dim, no);
            goto out;
        }
        for (int32_t k = 0; k < no; k++)
            split[k] = dim / no;
    }
    for (int32_t k = 0; k < no; k++) {
        d[axis] = split[k];
        if (!psim__out_set(g, n, k, dt, x->rank, d, error))
            goto out;
    }
    ok = TRUE;
out:
    g_free(split);
    return ok;
}

/* ---- Slice ---- */

int64_t psim__slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first)
{
    if (start < 0)
        start = start < -dim ? -dim - 1 : start + dim; /* avoid overflow near INT64_MIN */
    if (end < 0)
        end = end < -dim ? -dim - 1 : end + dim;
    if (step > 0) {
        start = CLAMP(start, 0, dim);
        end = CLAMP(end, 0, dim);
    } else {
        start = CLAMP(start, 0, dim - 1);
        end = CLAMP(end, -1, dim - 1);
    }
    *first = start;
    if (step == INT64_MIN)
        step = -INT64_MAX;
    if (step > 0)
        return end > start ? (end - start - 1) / step + 1 : 0;
    return start > end ? (start - end - 1) / (-step) + 1 : 0;
}

int psim__slice_params(const PsimGraph *g, const PsimNode *n, int32_t rank, PsimSliceParams *p,
                       gboolean *axes_known, GError **error)
{
    memset(p, 0, sizeof *p);
    *axes_known = FALSE;
    gboolean attrs = psim_node_attr(n, "starts") != NULL;
    int32_t ns, ne, na, nst;
    if (attrs) {
        ns = attr_or_input(g, n, "starts", 99, p->starts, PSIM__MAX_RANK, error);
        ne = attr_or_input(g, n, "ends", 99, p->ends, PSIM__MAX_RANK, error);
        na = attr_or_input(g, n, "axes", 99, p->axes, PSIM__MAX_RANK, error);
        nst = -3;
    } else {
        ns = psim__input(g, n, 1)
                 ? psim__input_ints(g, n, 1, p->starts, PSIM__MAX_RANK, "starts", error)
                 : -3;
        if (ns == -2)
            return -1;
        ne = psim__input(g, n, 2)
                 ? psim__input_ints(g, n, 2, p->ends, PSIM__MAX_RANK, "ends", error)
                 : -3;
        if (ne == -2)
            return -1;
        na = psim__input(g, n, 3)
                 ? psim__input_ints(g, n, 3, p->axes, PSIM__MAX_RANK, "axes", error)
                 : -3;
        if (na == -2)
            return -1;
        nst = psim__input(g, n, 4)
                  ? psim__input_ints(g, n, 4, p->steps, PSIM__MAX_RANK, "steps", error)
                  : -3;
        if (nst == -2)
            return -1;
    }
    if (ns == -2 || ne == -2 || na == -2)
        return -1;
    if (ns == -3 || ne == -3) {
        psim__error_node(error, g, n, "Slice needs starts and ends");
        return -1;
    }
    if (na == -3) {
        int32_t cnt = ns >= 0 ? ns : ne >= 0 ? ne : -1;
        if (cnt >= 0) {
            if (cnt > rank) {
                psim__error_node(error, g, n, "Slice has %d starts for rank %d", cnt, rank);
                return -1;
            }
            for (int32_t i = 0; i < cnt; i++)
                p->axes[i] = i;
            na = cnt;
        }
    }
    if (na >= 0) {
        gboolean seen[PSIM__MAX_RANK] = {0};
        for (int32_t i = 0; i < na; i++) {
            int32_t ax;
            if (!psim__axis(g, n, p->axes[i], rank, &ax, error))
                return -1;
            if (seen[ax]) {
                psim__error_node(error, g, n, "Slice axis %d is repeated", ax);
                return -1;
            }
            seen[ax] = TRUE;
            p->axes[i] = ax;
        }
        *axes_known = TRUE;
        p->n = na;
    }
    if (ns < 0 || ne < 0 || nst == -1 || na < 0)
        return 0;
    if (ns != ne || ns != na || (nst >= 0 && nst != ns)) {
        psim__error_node(error, g, n, "Slice's starts, ends, axes and steps differ in length");
        return -1;
    }
    for (int32_t i = 0; i < ns; i++) {
        if (nst < 0)
            p->steps[i] = 1;
        if (p->steps[i] == 0) {
            psim__error_node(error, g, n, "Slice step is zero");
            return -1;
        }
    }
    return 1;
}

static gboolean infer_slice(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    if (!x) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    if (x->rank > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "rank %d is too large", x->rank);
        return FALSE;
    }
    PsimSliceParams p;
    gboolean axes_known;
    int r = psim__slice_params(g, n, x->rank, &p, &axes_known, error);
    if (r < 0)
        return FALSE;
    int64_t d[PSIM__MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    if (r == 0) {
        for (int32_t i = 0; i < x->rank; i++)
            if (!axes_known)
                d[i] = PSIM_DIM_UNKNOWN;
        for (int32_t i = 0; axes_known && i < p.n; i++)
            d[p.axes[i]] = PSIM_DIM_UNKNOWN;
        return psim__out_set(g, n, 0, dt, x->rank, d, error);
    }
    for (int32_t i = 0; i < p.n; i++) {
        int32_t ax = (int32_t)p.axes[i];
        int64_t first;
        d[ax] = x->dims[ax] < 0
                    ? PSIM_DIM_UNKNOWN
                    : psim__slice_axis(x->dims[ax], p.starts[i], p.ends[i], p.steps[i], &first);
    }
    return psim__out_set(g, n, 0, dt, x->rank, d, error);
}

/* ---- Pad ---- */

static gboolean infer_pad(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    if (!x) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    if (x->rank > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "rank %d is too large", x->rank);
        return FALSE;
    }
    const char *mode = psim_node_attr_string(n, "mode", "constant");
    if (strcmp(mode, "constant") && strcmp(mode, "reflect") && strcmp(mode, "edge") &&
        strcmp(mode, "wrap")) {
        psim__error_node(error, g, n, "unknown Pad mode '%s'", mode);
        return FALSE;
    }
    int64_t pads[2 * PSIM__MAX_RANK], axes[PSIM__MAX_RANK];
    const char *pname = psim_node_attr(n, "paddings") ? "paddings" : "pads";
    int32_t np = attr_or_input(g, n, pname, 1, pads, 2 * PSIM__MAX_RANK, error);
    if (np == -2)
        return FALSE;
    if (np == -3) {
        psim__error_node(error, g, n, "Pad needs pads");
        return FALSE;
    }
    int32_t na =
        psim__input(g, n, 3) ? psim__input_ints(g, n, 3, axes, PSIM__MAX_RANK, "axes", error) : -3;
    if (na == -2)
        return FALSE;
    if (np == -1 || na == -1)
        return out_rank_only(g, n, 0, dt, x->rank, error);
    if (na == -3) {
        na = x->rank;
        for (int32_t i = 0; i < na; i++)
            axes[i] = i;
    }
    if (np != 2 * na) {
        psim__error_node(error, g, n, "Pad has %d pads for %d axes", np, na);
        return FALSE;
    }
    int64_t d[PSIM__MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    for (int32_t i = 0; i < na; i++) {
        int32_t ax;
        if (!psim__axis(g, n, axes[i], x->rank, &ax, error))
            return FALSE;
        if (d[ax] < 0)
            continue;
        if (pads[i] < -PSIM_MAX_ELEMENTS || pads[i] > PSIM_MAX_ELEMENTS ||
            pads[na + i] < -PSIM_MAX_ELEMENTS || pads[na + i] > PSIM_MAX_ELEMENTS) {
            psim__error_node(error, g, n, "Pad amount out of range");
            return FALSE;
        }
        d[ax] += pads[i] + pads[na + i];
        if (d[ax] < 0) {
            psim__error_node(error, g, n, "negative pads remove more than axis %d holds", ax);
            return FALSE;
        }
    }
    return psim__out_set(g, n, 0, dt, x->rank, d, error);
}

/* ---- Reshape and friends ---- */

static gboolean infer_reshape(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    int64_t s[PSIM__MAX_RANK];
    int32_t ns = attr_or_input(g, n, "shape", 1, s, PSIM__MAX_RANK, error);
    if (ns == -2)
        return FALSE;
    if (ns == -3) {
        psim__error_node(error, g, n, "Reshape needs a shape");
        return FALSE;
    }
    if (ns == -1)
        ns = psim__input_partial_ints(g, n, 1, s, PSIM__MAX_RANK, "shape", error);
    if (ns == -1) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    gboolean allowzero = psim_node_attr_int(n, "allowzero", 0) != 0;
    int32_t infer_at = -1;
    for (int32_t i = 0; i < ns; i++) {
        if (s[i] == PSIM__UNKNOWN_VALUE) {
            continue; /* computed at run time */
        } else if (s[i] == -1) {
            if (infer_at >= 0) {
                psim__error_node(error, g, n, "Reshape's shape has more than one -1");
                return FALSE;
            }
            infer_at = i;
        } else if (s[i] == 0 && !allowzero) {
            if (!x) {
                s[i] = PSIM_DIM_UNKNOWN;
                continue;
            }
            if (i >= x->rank) {
                psim__error_node(error, g, n,
                                 "Reshape's shape copies dimension %d (0) of a rank-%d input", i,
                                 x->rank);
                return FALSE;
            }
            s[i] = x->dims[i];
        } else if (s[i] < 0) {
            psim__error_node(error, g, n, "Reshape's shape has invalid value %" G_GINT64_FORMAT,
                             s[i]);
            return FALSE;
        }
    }
    if (allowzero && infer_at >= 0)
        for (int32_t i = 0; i < ns; i++)
            if (s[i] == 0) {
                psim__error_node(error, g, n, "Reshape with allowzero cannot mix 0 and -1");
                return FALSE;
            }
    for (int32_t i = 0; i < ns; i++)
        if (s[i] == PSIM__UNKNOWN_VALUE)
            s[i] = PSIM_DIM_UNKNOWN;
    int64_t total = x ? psim__dims_prod(x->dims, 0, x->rank) : -1;
    if (infer_at >= 0) {
        s[infer_at] = 1;
        int64_t rest = psim__dims_prod(s, 0, ns);
        s[infer_at] = PSIM_DIM_UNKNOWN;
        if (total >= 0 && rest > 0) {
            if (total % rest) {
                psim__error_node(error, g, n,
                                 "cannot reshape %" G_GINT64_FORMAT
                                 " elements: not a multiple of %" G_GINT64_FORMAT,
                                 total, rest);
                return FALSE;
            }
            s[infer_at] = total / rest;
        } else if (total >= 0 && rest == 0) {
            if (total != 0) {
                psim__error_node(error, g, n,
                                 "cannot reshape %" G_GINT64_FORMAT
                                 " elements into a shape with a zero dimension",
                                 total);
                return FALSE;
            }
        }
    } else {
        int64_t want = psim__dims_prod(s, 0, ns);
        if (total >= 0 && want >= 0 && total != want) {
            psim__error_node(error, g, n,
                             "cannot reshape %" G_GINT64_FORMAT " elements into %" G_GINT64_FORMAT,
                             total, want);
            return FALSE;
        }
    }
    return psim__out_set(g, n, 0, dt, ns, s, error);
}

static gboolean infer_flatten(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    if (!x)
        return out_rank_only(g, n, 0, dt, 2, error);
    int64_t axis = psim_node_attr_int(n, "axis", 1);
    if (axis < -(int64_t)x->rank || axis > x->rank) {
        psim__error_node(error, g, n,
                         "Flatten axis %" G_GINT64_FORMAT " is out of range for rank %d", axis,
                         x->rank);
        return FALSE;
    }
    if (axis < 0)
        axis += x->rank;
    int64_t d[2] = {psim__dims_prod(x->dims, 0, (int32_t)axis),
                    psim__dims_prod(x->dims, (int32_t)axis, x->rank)};
    return psim__out_set(g, n, 0, dt, 2, d, error);
}

static gboolean infer_transpose(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    const int64_t *perm;
    int32_t np = psim_node_attr_ints(n, "perm", &perm);
    if (!x) {
        if (np >= 0)
            return out_rank_only(g, n, 0, dt, np, error);
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    if (x->rank > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "rank %d is too large", x->rank);
        return FALSE;
    }
    int64_t d[PSIM__MAX_RANK];
    if (np < 0) {
        for (int32_t i = 0; i < x->rank; i++)
            d[i] = x->dims[x->rank - 1 - i];
        return psim__out_set(g, n, 0, dt, x->rank, d, error);
    }
    if (np != x->rank) {
        psim__error_node(error, g, n, "perm has %d entries for rank %d", np, x->rank);
        return FALSE;
    }
    gboolean seen[PSIM__MAX_RANK] = {0};
    for (int32_t i = 0; i < np; i++) {
        if (perm[i] < 0 || perm[i] >= x->rank || seen[perm[i]]) {
            psim__error_node(error, g, n, "perm is not a permutation of 0..%d", x->rank - 1);
            return FALSE;
        }
        seen[perm[i]] = TRUE;
        d[i] = x->dims[perm[i]];
    }
    return psim__out_set(g, n, 0, dt, x->rank, d, error);
}

static gboolean infer_squeeze(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    int64_t axes[PSIM__MAX_RANK];
    int32_t na = attr_or_input(g, n, "axes", 1, axes, PSIM__MAX_RANK, error);
    if (na == -2)
        return FALSE;
    if (!x || na == -1) {
        if (x && na == -1) {
            const PsimOutput *ai = psim__input_ranked(g, n, 1);
            if (ai && ai->rank == 1 && ai->dims[0] >= 0 && ai->dims[0] <= x->rank)
                return out_rank_only(g, n, 0, dt, x->rank - (int32_t)ai->dims[0], error);
        }
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    if (x->rank > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "rank %d is too large", x->rank);
        return FALSE;
    }
    gboolean drop[PSIM__MAX_RANK] = {0};
    if (na < 0) {
        for (int32_t i = 0; i < x->rank; i++) {
            if (x->dims[i] < 0) {
                psim__out_unknown(g, n, 0, dt);
                return TRUE;
            }
            drop[i] = x->dims[i] == 1;
        }
    }
    for (int32_t i = 0; i < na; i++) {
        int32_t ax;
        if (!psim__axis(g, n, axes[i], x->rank, &ax, error))
            return FALSE;
        if (x->dims[ax] >= 0 && x->dims[ax] != 1) {
            psim__error_node(error, g, n, "cannot squeeze axis %d of size %" G_GINT64_FORMAT, ax,
                             x->dims[ax]);
            return FALSE;
        }
        drop[ax] = TRUE;
    }
    int64_t d[PSIM__MAX_RANK];
    int32_t r = 0;
    for (int32_t i = 0; i < x->rank; i++)
        if (!drop[i])
            d[r++] = x->dims[i];
    return psim__out_set(g, n, 0, dt, r, d, error);
}

static gboolean infer_unsqueeze(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    int64_t axes[PSIM__MAX_RANK];
    int32_t na = attr_or_input(g, n, "axes", 1, axes, PSIM__MAX_RANK, error);
    if (na == -2)
        return FALSE;
    if (na == -3) {
        psim__error_node(error, g, n, "Unsqueeze needs axes");
        return FALSE;
    }
    if (!x) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    if (na == -1) {
        const PsimOutput *ai = psim__input_ranked(g, n, 1);
        if (ai && ai->rank == 1 && ai->dims[0] >= 0)
            return out_rank_only(g, n, 0, dt, x->rank + (int32_t)MIN(ai->dims[0], 64), error);
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    int32_t r = x->rank + na;
    if (r > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "rank %d is too large", r);
        return FALSE;
    }
    gboolean ins[PSIM__MAX_RANK] = {0};
    for (int32_t i = 0; i < na; i++) {
        int32_t ax;
        if (!psim__axis(g, n, axes[i], r, &ax, error))
            return FALSE;
        if (ins[ax]) {
            psim__error_node(error, g, n, "Unsqueeze axis %d is repeated", ax);
            return FALSE;
        }
        ins[ax] = TRUE;
    }
    int64_t d[PSIM__MAX_RANK];
    for (int32_t i = 0, j = 0; i < r; i++)
        d[i] = ins[i] ? 1 : x->dims[j++];
    return psim__out_set(g, n, 0, dt, r, d, error);
}

static gboolean infer_expand(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error) || !need_input(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    int64_t s[PSIM__MAX_RANK];
    int32_t ns = psim__input_partial_ints(g, n, 1, s, PSIM__MAX_RANK, "shape", error);
    if (ns == -2)
        return FALSE;
    if (ns == -1 || !x) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    for (int32_t i = 0; i < ns; i++)
        if (s[i] == PSIM__UNKNOWN_VALUE)
            s[i] = PSIM_DIM_UNKNOWN;
        else if (s[i] < 0) {
            psim__error_node(error, g, n, "Expand shape has negative value %" G_GINT64_FORMAT,
                             s[i]);
            return FALSE;
        }
    int64_t d[PSIM__MAX_RANK];
    int32_t r;
    if (!psim__broadcast(g, n, x->rank, x->dims, ns, s, &r, d, error))
        return FALSE;
    return psim__out_set(g, n, 0, dt, r, d, error);
}

static gboolean infer_tile(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error) || !need_input(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = psim__input_dtype(g, n, 0);
    int64_t rep[PSIM__MAX_RANK];
    int32_t nr = psim__input_ints(g, n, 1, rep, PSIM__MAX_RANK, "repeats", error);
    if (nr == -2)
        return FALSE;
    if (!x) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    if (nr == -1)
        return out_rank_only(g, n, 0, dt, x->rank, error);
    if (nr != x->rank) {
        psim__error_node(error, g, n, "Tile has %d repeats for rank %d", nr, x->rank);
        return FALSE;
    }
    int64_t d[PSIM__MAX_RANK];
    for (int32_t i = 0; i < nr; i++) {
        if (rep[i] < 0 || rep[i] > PSIM_MAX_ELEMENTS) {
            psim__error_node(error, g, n, "Tile repeat %" G_GINT64_FORMAT " is invalid", rep[i]);
            return FALSE;
        }
        d[i] = x->dims[i] < 0                                      ? PSIM_DIM_UNKNOWN
               : rep[i] && x->dims[i] > PSIM_MAX_ELEMENTS / rep[i] ? PSIM_MAX_ELEMENTS + 1
                                                                   : x->dims[i] * rep[i];
    }
    return psim__out_set(g, n, 0, dt, nr, d, error);
}

static gboolean infer_gather(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error) || !need_input(g, n, 1, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0), *idx = psim__input_ranked(g, n, 1);
    PsimDType dt = psim__input_dtype(g, n, 0);
    if (!x || !idx) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    int32_t axis;
    if (!psim__axis(g, n, psim_node_attr_int(n, "axis", 0), x->rank, &axis, error))
        return FALSE;
    int32_t r = x->rank - 1 + idx->rank;
    if (r > PSIM__MAX_RANK) {
        psim__error_node(error, g, n, "rank %d is too large", r);
        return FALSE;
    }
    int64_t d[PSIM__MAX_RANK];
    int32_t j = 0;
    for (int32_t i = 0; i < axis; i++)
        d[j++] = x->dims[i];
    for (int32_t i = 0; i < idx->rank; i++)
        d[j++] = idx->dims[i];
    for (int32_t i = axis + 1; i < x->rank; i++)
        d[j++] = x->dims[i];
    return psim__out_set(g, n, 0, dt, r, d, error);
}

void psim__shape_range(const PsimNode *n, int32_t rank, int32_t *start, int32_t *end)
{
    int64_t s = psim_node_attr_int(n, "start", 0), e = psim_node_attr_int(n, "end", rank);
    if (s < 0)
        s += rank;
    if (e < 0)
        e += rank;
    *start = (int32_t)CLAMP(s, 0, rank);
    *end = (int32_t)CLAMP(e, 0, rank);
}

/* Shape and Size give int64 (ONNX), or TF's out_type (int32 by default in TF files). */
static PsimDType index_dtype(const PsimNode *n)
{
    PsimDType t = psim__attr_dtype(n, "out_type", PSIM_DTYPE_INT64);
    return t == PSIM_DTYPE_INT32 ? t : PSIM_DTYPE_INT64;
}

static gboolean infer_shape(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    const PsimOutput *x = psim__input_ranked(g, n, 0);
    PsimDType dt = index_dtype(n);
    if (!x)
        return out_rank_only(g, n, 0, dt, 1, error);
    int32_t s, e;
    psim__shape_range(n, x->rank, &s, &e);
    int64_t len = MAX(0, e - s);
    return psim__out_set(g, n, 0, dt, 1, &len, error);
}

static gboolean infer_size(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    return psim__out_set(g, n, 0, index_dtype(n), 0, NULL, error);
}

static gboolean infer_constant_of_shape(PsimGraph *g, PsimNode *n, GError **error)
{
    if (!need_input(g, n, 0, error))
        return FALSE;
    PsimDType dt = PSIM_DTYPE_FLOAT32;
    const PsimAttr *v = psim_node_attr(n, "value");
    if (v && v->type == PSIM_ATTR_TENSOR && v->v.t) {
        if (v->v.t->n_elems != 1) {
            psim__error_node(error, g, n, "ConstantOfShape's value must hold one element");
            return FALSE;
        }
        dt = v->v.t->dtype;
    }
    int64_t s[PSIM__MAX_RANK];
    int32_t ns = psim__input_partial_ints(g, n, 0, s, PSIM__MAX_RANK, "shape", error);
    if (ns == -2)
        return FALSE;
    if (ns == -1) {
        psim__out_unknown(g, n, 0, dt);
        return TRUE;
    }
    for (int32_t i = 0; i < ns; i++)
        if (s[i] == PSIM__UNKNOWN_VALUE)
            s[i] = PSIM_DIM_UNKNOWN;
        else if (s[i] < 0) {
            psim__error_node(error, g, n,
                             "ConstantOfShape has negative dimension %" G_GINT64_FORMAT, s[i]);
            return FALSE;
        }
    return psim__out_set(g, n, 0, dt, ns, s, error);
}

static void count_meta(const PsimGraph *g, const PsimNode *n, PsimOpCount *out)
{
    (void)g;
    memset(out, 0, sizeof *out);
    for (int32_t k = 0; k < n->n_outputs; k++)
        out->bytes_written += n->outputs[k].bytes;
}

static const PsimOpDef shape_ops[] = {
    {"Concat", "joins tensors along an axis", 0, infer_concat, psim__count_move},
    {"Split", "splits along an axis (split attr or input, num_outputs)", 0, infer_split,
     psim__count_move, split_n_outputs},
    {"Slice", "strided slice (attrs before opset 10, inputs after)", 0, infer_slice,
     psim__count_move},
    {"Pad", "pads (attr before opset 11, inputs after)", 0, infer_pad, psim__count_move},
    {"Reshape", "new shape; 0 copies a dim, -1 is inferred (allowzero)", 0, infer_reshape,
     psim__count_move},
    {"Flatten", "2-D view split at an axis", 0, infer_flatten, psim__count_move},
    {"Transpose", "permutes dims (reversed by default)", 0, infer_transpose, psim__count_move},
    {"Squeeze", "removes size-1 dims (axes attr or input)", 0, infer_squeeze, psim__count_move},
    {"Unsqueeze", "inserts size-1 dims (axes attr or input)", 0, infer_unsqueeze, psim__count_move},
    {"Expand", "broadcasts to a shape", 0, infer_expand, psim__count_move},
    {"Tile", "repeats along each dim", 0, infer_tile, psim__count_move},
    {"Gather", "takes entries along an axis", 0, infer_gather, psim__count_move},
    {"Shape", "the input's shape as int64 (start/end)", 0, infer_shape, count_meta},
    {"Size", "the input's element count as int64", 0, infer_size, count_meta},
    {"ConstantOfShape", "a tensor of the given shape filled with one value", 0,
     infer_constant_of_shape, count_meta},
};

void psim__ops_register_shape(void)
{
    psim__ops_register_group(shape_ops, G_N_ELEMENTS(shape_ops));
}
