/* MatMul (numpy semantics: 1-D promotion, batch broadcasting) and Gemm, on OpenBLAS sgemm and
 * dgemm for floats and plain loops for integers. BLAS runs single-threaded (see registry.c). */
#include "cpu-private.h"

#include <cblas.h>

#define GEMM_INT(T)                                                                       \
    for (int64_t i = 0; i < M; i++)                                                              \
        for (int64_t j = 0; j < N; j++) {                                                        \
            uint64_t s = 0; /* wraps instead of signed overflow */                               \
            for (int64_t k = 0; k < K; k++)                                                      \
                s += (uint64_t)((const T *)a)[i * K + k] * (uint64_t)((const T *)b)[k * N + j];  \
            ((T *)c)[i * N + j] = (T)s;                                                          \
        }

static void gemm_int(PsimDType t, int64_t M, int64_t N, int64_t K, const void *a, const void *b,
                     void *c)
{
    if (t == PSIM_DTYPE_INT64)
        GEMM_INT(int64_t)
    else
        GEMM_INT(int32_t)
}

static void gemm_any(PsimDType t, int64_t M, int64_t N, int64_t K, const void *a, const void *b,
                     void *c)
{
    if (M == 0 || N == 0)
        return;
    if (K == 0) {
        memset(c, 0, (size_t)(M * N) * psim_dtype_size(t));
        return;
    }
    if (t == PSIM_DTYPE_FLOAT32 && M == 1)
        cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)K, (blasint)N, 1.0f, b, (blasint)N, a, 1,
                    0.0f, c, 1);
    else if (t == PSIM_DTYPE_FLOAT32)
        psim__sgemm(FALSE, FALSE, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    else if (t == PSIM_DTYPE_FLOAT64)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)M, (blasint)N, (blasint)K,
                    1.0, a, (blasint)K, b, (blasint)N, 0.0, c, (blasint)N);
    else
        gemm_int(t, M, N, K, a, b, c);
}

static gboolean run_matmul(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *a = ctx->inputs[0], *b = ctx->inputs[1];
    if (a->dtype != b->dtype || a->rank < 1 || b->rank < 1) {
        KERR(ctx, error, "MatMul needs two inputs of rank >= 1 and one dtype");
        return FALSE;
    }
    /* Promote 1-D operands as numpy does, remembering to drop the added dims. */
    int64_t da[PSIM_CPU_MAX_RANK + 1], db[PSIM_CPU_MAX_RANK + 1];
    int32_t ra = a->rank, rb = b->rank;
    if (ra == 1) {
        da[0] = 1;
        da[1] = a->dims[0];
        ra = 2;
    } else
        memcpy(da, a->dims, sizeof(int64_t) * (size_t)ra);
    if (rb == 1) {
        db[0] = b->dims[0];
        db[1] = 1;
        rb = 2;
    } else
        memcpy(db, b->dims, sizeof(int64_t) * (size_t)rb);
    int64_t M = da[ra - 2], K = da[ra - 1], N = db[rb - 1];
    if (db[rb - 2] != K) {
        KERR(ctx, error, "MatMul inner dimensions differ (%" G_GINT64_FORMAT " and %" G_GINT64_FORMAT
             ")", K, db[rb - 2]);
        return FALSE;
    }
    int32_t rbat;
    int64_t bat[PSIM_CPU_MAX_RANK];
    if (!psim__cpu_bcast_shape(ctx, ra - 2, da, rb - 2, db, &rbat, bat, error))
        return FALSE;
    int64_t odims[PSIM_CPU_MAX_RANK + 2];
    int32_t orank = 0;
    for (int32_t i = 0; i < rbat; i++)
        odims[orank++] = bat[i];
    if (a->rank > 1)
        odims[orank++] = M;
    if (b->rank > 1)
        odims[orank++] = N;
    PsimTensor *y = psim__cpu_out(ctx, 0, a->dtype, orank, odims, error);
    if (!y)
        return FALSE;
    size_t es = psim_dtype_size(a->dtype);
    int64_t n_bat = psim_shape_elems(rbat, bat);
    int64_t a_bat = psim_shape_elems(ra - 2, da), b_bat = psim_shape_elems(rb - 2, db);
    if (b_bat == 1) {
        /* B is shared: fold A's batch into its rows, one big GEMM. */
        gemm_any(a->dtype, M * a_bat, N, K, a->data, b->data, y->data);
        return TRUE;
    }
    /* Batch offsets by broadcasting the batch dims of A and B (as matrices of 1 element). */
    int32_t pa = rbat - (ra - 2), pb = rbat - (rb - 2);
    for (int64_t i = 0; i < n_bat; i++) {
        int64_t rem = i, ia = 0, ib = 0, sa = 1, sb = 1;
        for (int32_t d = rbat - 1; d >= 0; d--) {
            int64_t idx = rem % bat[d];
            rem /= bat[d];
            int64_t xa = d - pa >= 0 ? da[d - pa] : 1, xb = d - pb >= 0 ? db[d - pb] : 1;
            if (xa != 1)
                ia += idx * sa;
            if (xb != 1)
                ib += idx * sb;
            sa *= xa;
            sb *= xb;
        }
        gemm_any(a->dtype, M, N, K, (const char *)a->data + (size_t)(ia * M * K) * es,
                 (const char *)b->data + (size_t)(ib * K * N) * es,
                 (char *)y->data + (size_t)(i * M * N) * es);
    }
    return TRUE;
}

typedef struct {
    const void *c;
    void *y;
    double beta;
    gboolean f64;
} FillRun;

static void fill_row(void *user, const int64_t *off, int64_t out_off, int64_t n,
                     const int64_t *stride)
{
    FillRun *r = user;
    if (r->f64) {
        const double *c = (const double *)r->c + off[0];
        double *y = (double *)r->y + out_off;
        for (int64_t i = 0; i < n; i++)
            y[i] = r->beta * c[stride[0] ? i : 0];
        return;
    }
    const float *c = (const float *)r->c + off[0];
    float *y = (float *)r->y + out_off;
    float beta = (float)r->beta;
    if (stride[0])
        for (int64_t i = 0; i < n; i++)
            y[i] = beta * c[i];
    else
        for (int64_t i = 0; i < n; i++)
            y[i] = beta * c[0];
}

/* Y = alpha * A' B' + beta * C, C broadcast to (M, N). */
static gboolean run_gemm(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *a = ctx->inputs[0], *b = ctx->inputs[1], *c = psim__cpu_in(ctx, 2);
    const PsimNode *n = ctx->node;
    gboolean ta = psim_node_attr_int(n, "transA", 0) != 0, tb = psim_node_attr_int(n, "transB", 0) != 0;
    float alpha = (float)psim_node_attr_float(n, "alpha", 1.0);
    float beta = (float)psim_node_attr_float(n, "beta", 1.0);
    PsimDType dt = a->dtype;
    if (a->rank != 2 || b->rank != 2 || (dt != PSIM_DTYPE_FLOAT32 && dt != PSIM_DTYPE_FLOAT64) ||
        b->dtype != dt || (c && c->dtype != dt)) {
        KERR(ctx, error, "Gemm needs 2-D float32 or float64 A and B (and C) of one type");
        return FALSE;
    }
    gboolean f64 = dt == PSIM_DTYPE_FLOAT64;
    int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
    int64_t N = tb ? b->dims[0] : b->dims[1], Kb = tb ? b->dims[1] : b->dims[0];
    if (K != Kb) {
        KERR(ctx, error, "Gemm inner dimensions differ (%" G_GINT64_FORMAT " and %" G_GINT64_FORMAT
             ")", K, Kb);
        return FALSE;
    }
    int64_t od[2] = {M, N};
    if (c) {
        int32_t r;
        int64_t bd[PSIM_CPU_MAX_RANK];
        if (c->rank > 2 ||
            !psim__cpu_bcast_shape(ctx, 2, od, c->rank, c->dims, &r, bd, error))
            return FALSE;
        if (bd[0] != M || bd[1] != N) {
            KERR(ctx, error, "Gemm C does not broadcast to (%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
                 ")", M, N);
            return FALSE;
        }
    }
    PsimTensor *y = psim__cpu_out(ctx, 0, dt, 2, od, error);
    if (!y)
        return FALSE;
    float bb = 0.0f;
    if (c && beta != 0.0f) {
        PsimBcast bc;
        const PsimTensor *ins[1] = {c};
        psim__cpu_bcast_init(&bc, 1, ins, 2, od);
        FillRun fr = {c->data, y->data, f64 ? psim_node_attr_float(n, "beta", 1.0) : beta, f64};
        psim__cpu_bcast_run(&bc, fill_row, &fr);
        bb = 1.0f;
    }
    if (f64 && M && N) {
        /* float64 (gradient checks): one dgemm, alpha and beta in double. */
        if (!K) {
            if (bb == 0.0f)
                memset(y->data, 0, y->nbytes);
            return TRUE;
        }
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (blasint)M, (blasint)N, (blasint)K, psim_node_attr_float(n, "alpha", 1.0),
                    a->data, (blasint)a->dims[1], b->data, (blasint)b->dims[1], bb, y->data,
                    (blasint)N);
        return TRUE;
    }
    if (M == 0 || N == 0)
        return TRUE;
    if (K == 0) {
        if (bb == 0.0f)
            memset(y->data, 0, y->nbytes);
        return TRUE;
    }
    if (M == 1) {
        /* A row vector: GEMV reads B once, where this OpenBLAS's GEMM would first pack all of it
         * (VGG's first fully connected layer has 400 MB of weights). */
        if (tb)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)N, (blasint)K, alpha, b->data,
                        (blasint)K, a->data, ta ? (blasint)a->dims[1] : 1, bb, y->data, 1);
        else
            cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)K, (blasint)N, alpha, b->data,
                        (blasint)N, a->data, ta ? (blasint)a->dims[1] : 1, bb, y->data, 1);
        return TRUE;
    }
    psim__sgemm(ta, tb, M, N, K, alpha, a->data, a->dims[1], b->data, b->dims[1], bb, y->data, N);
    return TRUE;
}

void psim__cpu_register_matmul(void)
{
    static const PsimDType mm[] = {PSIM_DTYPE_FLOAT32, PSIM_DTYPE_FLOAT64, PSIM_DTYPE_INT32,
                                   PSIM_DTYPE_INT64, -1};
    static const PsimDType gemm[] = {PSIM_DTYPE_FLOAT32, PSIM_DTYPE_FLOAT64, -1};
    psim__cpu_add("MatMul", "cpu-matmul-blas", "batched matrix product (OpenBLAS gemm)",
                  run_matmul, mm, NULL);
    psim__cpu_add("Gemm", "cpu-gemm-blas", "alpha*A'B' + beta*C (OpenBLAS sgemm, dgemm)", run_gemm,
                  gemm, NULL);
}
