/* Reductions over any set of axes: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
 * ReduceLogSum, ReduceLogSumExp (max + log of the shifted sum, floats), ArgMax, ArgMin,
 * ReduceSumSquare, ReduceL1, ReduceL2 (axes from the attribute or, from opset 13/18, input 1;
 * keepdims; noop_with_empty_axes). The input is walked once in memory order; the output offset
 * comes from broadcasting the kept shape against the input (so the accumulator row is either a
 * run or one cell). float32 accumulates in float32 rows, float64/int64 in their own type. */
#include "cpu-private.h"

#include <math.h>

/* R_LSE is LogSumExp's second pass (exp(x - max) summed); R_LOGSUM and R_LOGSUMEXP are the
 * ops, which reduce as R_SUM and R_MAX then R_LSE. */
typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_SUMSQ, R_L1, R_L2, R_LOGSUM, R_LOGSUMEXP, R_LSE } RKind;

static RKind kind_of(const char *op)
{
    static const char *names[] = {"ReduceSum",    "ReduceMean",     "ReduceMax", "ReduceMin",
                                  "ReduceProd",   "ReduceSumSquare", "ReduceL1", "ReduceL2",
                                  "ReduceLogSum", "ReduceLogSumExp"};
    for (int i = 0; i < 10; i++)
        if (!strcmp(op, names[i]))
            return (RKind)i;
    g_assert_not_reached();
}

typedef struct {
    RKind k;
    PsimDType t;
    const void *x;
    void *acc;
    const void *max; /* R_LSE: each output cell's max, laid out as acc */
} RRun;

/* exp(x - max) summed into the accumulator (floats only). */
#define LSE_ROW(T, EXP)                                                                           \
    {                                                                                             \
        const T *restrict x = (const T *)r->x + in_off;                                           \
        T *restrict a = (T *)r->acc + off[0];                                                     \
        const T *restrict m = (const T *)r->max + off[0];                                         \
        if (stride[0])                                                                            \
            for (int64_t i = 0; i < n; i++)                                                       \
                a[i] += EXP(x[i] - m[i]);                                                         \
        else                                                                                      \
            for (int64_t i = 0; i < n; i++)                                                       \
                a[0] += EXP(x[i] - m[0]);                                                         \
    }

#define RED_ROW(T)                                                                                \
    {                                                                                             \
        const T *restrict x = (const T *)r->x + in_off;                                           \
        T *restrict a = (T *)r->acc + off[0];                                                     \
        if (stride[0])                                                                            \
            switch (r->k) {                                                                       \
            case R_MAX: for (int64_t i = 0; i < n; i++) a[i] = x[i] > a[i] ? x[i] : a[i]; break;  \
            case R_MIN: for (int64_t i = 0; i < n; i++) a[i] = x[i] < a[i] ? x[i] : a[i]; break;  \
            case R_PROD: for (int64_t i = 0; i < n; i++) a[i] *= x[i]; break;                     \
            case R_SUMSQ: case R_L2: for (int64_t i = 0; i < n; i++) a[i] += x[i] * x[i]; break;  \
            case R_L1: for (int64_t i = 0; i < n; i++) a[i] += x[i] < 0 ? -x[i] : x[i]; break;    \
            default: for (int64_t i = 0; i < n; i++) a[i] += x[i]; break;                         \
            }                                                                                     \
        else {                                                                                    \
            T v = a[0];                                                                           \
            switch (r->k) {                                                                       \
            case R_MAX: for (int64_t i = 0; i < n; i++) v = x[i] > v ? x[i] : v; break;           \
            case R_MIN: for (int64_t i = 0; i < n; i++) v = x[i] < v ? x[i] : v; break;           \
            case R_PROD: for (int64_t i = 0; i < n; i++) v *= x[i]; break;                        \
            case R_SUMSQ: case R_L2: for (int64_t i = 0; i < n; i++) v += x[i] * x[i]; break;     \
            case R_L1: for (int64_t i = 0; i < n; i++) v += x[i] < 0 ? -x[i] : x[i]; break;       \
            default: for (int64_t i = 0; i < n; i++) v += x[i]; break;                            \
            }                                                                                     \
            a[0] = v;                                                                             \
        }                                                                                         \
    }

static void red_row(void *user, const int64_t *off, int64_t in_off, int64_t n,
                    const int64_t *stride)
{
    RRun *r = user;
    if (r->k == R_LSE) {
        if (r->t == PSIM_DTYPE_FLOAT32)
            LSE_ROW(float, expf)
        else
            LSE_ROW(double, exp)
        return;
    }
    if (r->t == PSIM_DTYPE_FLOAT32)
        RED_ROW(float)
    else if (r->t == PSIM_DTYPE_FLOAT64)
        RED_ROW(double)
    else if (r->t == PSIM_DTYPE_INT64)
        RED_ROW(int64_t)
    else
        RED_ROW(int32_t)
}

static gboolean run_reduce(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    RKind k = kind_of(ctx->node->op);
    if (x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64 &&
        x->dtype != PSIM_DTYPE_INT64 && x->dtype != PSIM_DTYPE_INT32) {
        KERR(ctx, error, "%s has no CPU kernel for %s", ctx->node->op, psim_dtype_name(x->dtype));
        return FALSE;
    }
    g_autofree int64_t *axes = NULL;
    int32_t na;
    if (!psim__cpu_ints(ctx, 1, "axes", &axes, &na, error))
        return FALSE;
    gboolean keep = psim_node_attr_int(ctx->node, "keepdims", 1) != 0;
    gboolean noop = psim_node_attr_int(ctx->node, "noop_with_empty_axes", 0) != 0;
    if (na <= 0 && noop)
        return psim__cpu_view(ctx, 0, x, x->rank, x->dims, error) != NULL;
    gboolean red[PSIM_CPU_MAX_RANK] = {FALSE};
    for (int32_t i = 0; i < x->rank; i++)
        red[i] = na <= 0;
    for (int32_t i = 0; i < na; i++) {
        int32_t a;
        if (!psim__cpu_axis(ctx, axes[i], x->rank, &a, error))
            return FALSE;
        red[a] = TRUE;
    }
    int64_t kd[PSIM_CPU_MAX_RANK], od[PSIM_CPU_MAX_RANK], cnt = 1;
    int32_t orank = 0;
    for (int32_t i = 0; i < x->rank; i++) {
        kd[i] = red[i] ? 1 : x->dims[i];
        if (red[i])
            cnt *= x->dims[i];
        if (!red[i] || keep)
            od[orank++] = kd[i];
    }
    gboolean logs = k == R_LOGSUM || k == R_LOGSUMEXP;
    if (logs && x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64) {
        KERR(ctx, error, "%s has no CPU kernel for %s", ctx->node->op, psim_dtype_name(x->dtype));
        return FALSE;
    }
    if (k == R_LOGSUM)
        k = R_SUM; /* then the log below */
    else if (k == R_LOGSUMEXP)
        k = R_MAX; /* the max first, then R_LSE against it */
    if ((k == R_MAX || k == R_MIN) && cnt == 0 && !logs) {
        KERR(ctx, error, "%s over an empty set of values", ctx->node->op);
        return FALSE;
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, x->dtype, orank, od, error);
    if (!y)
        return FALSE;
    /* Initialize with the identity of the reduction, or the first slice for max/min. */
    size_t es = psim_dtype_size(x->dtype);
    for (int64_t i = 0; i < y->n_elems; i++) {
        double v = (k == R_PROD) ? 1.0 : 0.0;
        if (k == R_MAX || k == R_MIN)
            v = k == R_MAX ? -INFINITY : INFINITY;
        switch (x->dtype) {
        case PSIM_DTYPE_FLOAT32: ((float *)y->data)[i] = (float)v; break;
        case PSIM_DTYPE_FLOAT64: ((double *)y->data)[i] = v; break;
        case PSIM_DTYPE_INT64:
            ((int64_t *)y->data)[i] = k == R_MAX ? INT64_MIN : k == R_MIN ? INT64_MAX : (int64_t)v;
            break;
        default:
            ((int32_t *)y->data)[i] = k == R_MAX ? INT32_MIN : k == R_MIN ? INT32_MAX : (int32_t)v;
        }
    }
    (void)es;
    PsimTensor kept = {.dtype = x->dtype, .rank = x->rank, .dims = kd};
    const PsimTensor *ins[1] = {&kept};
    PsimBcast bc;
    psim__cpu_bcast_init(&bc, 1, ins, x->rank, x->dims);
    RRun run = {k, x->dtype, x->data, y->data, NULL};
    psim__cpu_bcast_run(&bc, red_row, &run);
    if (logs) {
        /* LogSum: log of the sum. LogSumExp: max + log(sum(exp(x - max))), which neither
         * overflows nor loses a row far below the others; an empty or all -inf row is -inf. */
        gboolean lse = kind_of(ctx->node->op) == R_LOGSUMEXP;
        g_autofree void *mx = lse ? g_memdup2(y->data, y->nbytes) : NULL;
        if (lse) {
            for (int64_t i = 0; i < y->n_elems; i++) {
                if (x->dtype == PSIM_DTYPE_FLOAT32) {
                    float *m = (float *)mx + i;
                    *m = isfinite(*m) ? *m : 0.0f;
                    ((float *)y->data)[i] = 0.0f;
                } else {
                    double *m = (double *)mx + i;
                    *m = isfinite(*m) ? *m : 0.0;
                    ((double *)y->data)[i] = 0.0;
                }
            }
            RRun second = {R_LSE, x->dtype, x->data, y->data, mx};
            psim__cpu_bcast_run(&bc, red_row, &second);
        }
        for (int64_t i = 0; i < y->n_elems; i++) {
            if (x->dtype == PSIM_DTYPE_FLOAT32) {
                float *v = (float *)y->data + i;
                *v = logf(*v) + (lse ? ((const float *)mx)[i] : 0.0f);
            } else {
                double *v = (double *)y->data + i;
                *v = log(*v) + (lse ? ((const double *)mx)[i] : 0.0);
            }
        }
        return TRUE;
    }
    if (k == R_MEAN || k == R_L2) {
        for (int64_t i = 0; i < y->n_elems; i++) {
            if (x->dtype == PSIM_DTYPE_FLOAT32) {
                float *v = (float *)y->data + i;
                *v = k == R_MEAN ? (cnt ? *v / (float)cnt : NAN) : sqrtf(*v);
            } else if (x->dtype == PSIM_DTYPE_FLOAT64) {
                double *v = (double *)y->data + i;
                *v = k == R_MEAN ? (cnt ? *v / (double)cnt : NAN) : sqrt(*v);
            } else if (x->dtype == PSIM_DTYPE_INT64) {
                int64_t *v = (int64_t *)y->data + i;
                *v = k == R_MEAN ? (cnt ? *v / cnt : 0) : (int64_t)sqrt((double)*v);
            } else {
                int32_t *v = (int32_t *)y->data + i;
                *v = k == R_MEAN ? (cnt ? (int32_t)(*v / cnt) : 0) : (int32_t)sqrt((double)*v);
            }
        }
    }
    return TRUE;
}

/* ArgMax, ArgMin: the index (int64) of the first extreme along `axis` (the last one with
 * select_last_index), keepdims as the reductions. A NaN is never selected over a number. */
static gboolean run_arg(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    int32_t r = x->rank, axis;
    if (r == 0 || !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", 0), r, &axis, error)) {
        if (error && !*error)
            KERR(ctx, error, "%s needs an input of rank >= 1", ctx->node->op);
        return FALSE;
    }
    gboolean keep = psim_node_attr_int(ctx->node, "keepdims", 1) != 0;
    gboolean last = psim_node_attr_int(ctx->node, "select_last_index", 0) != 0;
    gboolean is_max = !strcmp(ctx->node->op, "ArgMax");
    int64_t od[PSIM_CPU_MAX_RANK];
    int32_t orank = 0;
    for (int32_t d = 0; d < r; d++)
        if (d != axis)
            od[orank++] = x->dims[d];
        else if (keep)
            od[orank++] = 1;
    PsimTensor *y = psim__cpu_out(ctx, 0, PSIM_DTYPE_INT64, orank, od, error);
    if (!y)
        return FALSE;
    int64_t outer = psim_shape_elems(axis, x->dims), n = x->dims[axis];
    int64_t inner = psim_shape_elems(r - axis - 1, x->dims + axis + 1);
    if (n == 0 && y->n_elems > 0) {
        KERR(ctx, error, "%s along an empty axis", ctx->node->op);
        return FALSE;
    }
    int64_t *out = y->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t best = 0;
            double bv = 0;
            for (int64_t k = 0; k < n; k++) {
                int64_t at = (o * n + k) * inner + i;
                double v = x->dtype == PSIM_DTYPE_FLOAT32 ? ((const float *)x->data)[at]
                           : x->dtype == PSIM_DTYPE_FLOAT64 ? ((const double *)x->data)[at]
                           : x->dtype == PSIM_DTYPE_INT64 ? (double)((const int64_t *)x->data)[at]
                                                          : (double)((const int32_t *)x->data)[at];
                gboolean better = k == 0 || (is_max ? v > bv || (last && v == bv)
                                                    : v < bv || (last && v == bv));
                if (better) {
                    best = k;
                    bv = v;
                }
            }
            out[o * inner + i] = best;
        }
    return TRUE;
}

void psim__cpu_register_reduce(void)
{
    static const PsimDType types[] = {PSIM_DTYPE_FLOAT32, PSIM_DTYPE_FLOAT64, PSIM_DTYPE_INT64,
                                      PSIM_DTYPE_INT32, -1};
    static const char *ops[] = {"ReduceSum",       "ReduceMean",   "ReduceMax",
                                "ReduceMin",       "ReduceProd",   "ReduceSumSquare",
                                "ReduceL1",        "ReduceL2",     "ReduceLogSum",
                                "ReduceLogSumExp"};
    for (size_t i = 0; i < G_N_ELEMENTS(ops); i++)
        psim__cpu_add(ops[i], "cpu-reduce", "reduction over a set of axes", run_reduce, types,
                      NULL);
    psim__cpu_add("ArgMax", "cpu-arg", "index of the max along an axis", run_arg, types, NULL);
    psim__cpu_add("ArgMin", "cpu-arg", "index of the min along an axis", run_arg, types, NULL);
}
