/* GPU kernels for elementwise ops (numpy broadcasting, ew.cu), Cast, the data-movement ops and
 * the shape ops. Output shapes come from the same code as the CPU kernels:
 *  - views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) and Shape/Size run the CPU
 *    kernel itself on the device tensor (it only reads shapes) with integer inputs copied to the
 *    host;
 *  - Transpose, Slice, Pad, Expand, Tile, Concat, Split and Gather run the CPU kernel once per
 *    input shape on int64 "index" tensors (element i of input j holds (j << 40 | i) + 1), which
 *    yields each output element's source; the map is uploaded and cached in the node's state,
 *    and every step is one gather kernel on the GPU. */
#include "cuda-private.h"

#define CT_NONE (-1)

static int ctype(PsimDType t)
{
    switch (t) {
    case PSIM_DTYPE_FLOAT32: return PSIM_CT_F32;
    case PSIM_DTYPE_INT64: return PSIM_CT_I64;
    case PSIM_DTYPE_INT32: return PSIM_CT_I32;
    case PSIM_DTYPE_BOOL: return PSIM_CT_BOOL;
    case PSIM_DTYPE_FLOAT64: return PSIM_CT_F64;
    default: return CT_NONE;
    }
}

static gboolean launch(PsimKernelCtx *ctx, GError **error, int rc, const char *what)
{
    if (rc)
        return psim__cuda_fail(ctx, error, "CUDA", what, cudaGetErrorString((cudaError_t)rc));
    return TRUE;
}

static PsimTensor *host_alloc(PsimKernelCtx *ctx, PsimDType dtype, int32_t rank,
                              const int64_t *dims, GError **error)
{
    (void)ctx;
    return psim_tensor_new(dtype, rank, dims, error);
}

/* --- Elementwise ---------------------------------------------------------------------------- */

static gboolean bcast_geom(PsimKernelCtx *ctx, int32_t n_in, PsimTensor *const *in, int32_t rank,
                           const int64_t *dims, PsimCudaBcast *b, GError **error)
{
    if (rank > PSIM_CUDA_MAX_RANK) {
        KERR(ctx, error, "rank %d is above the GPU kernels' %d", rank, PSIM_CUDA_MAX_RANK);
        return FALSE;
    }
    memset(b, 0, sizeof *b);
    b->rank = rank;
    for (int32_t d = 0; d < rank; d++)
        b->dims[d] = dims[d];
    for (int32_t k = 0; k < n_in; k++) {
        int64_t s = 1;
        for (int32_t d = rank - 1; d >= 0; d--) {
            int32_t id = d - (rank - in[k]->rank);
            int64_t dim = id >= 0 ? in[k]->dims[id] : 1;
            b->strides[k][d] = dim == 1 ? 0 : s;
            s *= dim;
        }
    }
    return TRUE;
}

typedef struct {
    const char *op;
    int code;
    gboolean compare;
} EwOp;

static const EwOp ew_ops[] = {
    {"Add", PSIM_CE_ADD, FALSE},       {"Sub", PSIM_CE_SUB, FALSE},
    {"Mul", PSIM_CE_MUL, FALSE},       {"Div", PSIM_CE_DIV, FALSE},
    {"Pow", PSIM_CE_POW, FALSE},       {"Max", PSIM_CE_MAX, FALSE},
    {"Min", PSIM_CE_MIN, FALSE},       {"Sum", PSIM_CE_ADD, FALSE},
    {"Equal", PSIM_CE_EQUAL, TRUE},    {"Less", PSIM_CE_LESS, TRUE},
    {"Greater", PSIM_CE_GREATER, TRUE}, {"Sqrt", PSIM_CE_SQRT, FALSE},
    {"Neg", PSIM_CE_NEG, FALSE},       {"Exp", PSIM_CE_EXP, FALSE},
    {"Log", PSIM_CE_LOG, FALSE},       {"Relu", PSIM_CE_RELU, FALSE},
    {"Sigmoid", PSIM_CE_SIGMOID, FALSE}, {"Tanh", PSIM_CE_TANH, FALSE},
    {"Erf", PSIM_CE_ERF, FALSE},       {"Abs", PSIM_CE_ABS, FALSE},
    {"Clip", PSIM_CE_CLIP, FALSE},     {"Where", PSIM_CE_WHERE, FALSE},
};

static const EwOp *ew_find(const char *op)
{
    for (size_t i = 0; i < G_N_ELEMENTS(ew_ops); i++)
        if (!strcmp(ew_ops[i].op, op))
            return &ew_ops[i];
    return NULL;
}

/* out = a op b (broadcast), allocated as output k of ctx. */
static PsimTensor *binary(PsimKernelCtx *ctx, const EwOp *e, PsimTensor *a, const void *pa,
                          PsimTensor *b, const void *pb, GError **error)
{
    int32_t rank;
    int64_t dims[PSIM_CPU_MAX_RANK];
    if (a->dtype != b->dtype) {
        KERR(ctx, error, "inputs have different dtypes (%s, %s)", psim_dtype_name(a->dtype),
             psim_dtype_name(b->dtype));
        return NULL;
    }
    if (!psim__cpu_bcast_shape(ctx, a->rank, a->dims, b->rank, b->dims, &rank, dims, error))
        return NULL;
    PsimCudaBcast g;
    PsimTensor *in[2] = {a, b};
    if (!bcast_geom(ctx, 2, in, rank, dims, &g, error))
        return NULL;
    int ct = ctype(a->dtype);
    if (ct == CT_NONE || (ct != PSIM_CT_F32 && e->code == PSIM_CE_POW) ||
        (ct == PSIM_CT_BOOL && e->code != PSIM_CE_EQUAL)) {
        KERR(ctx, error, "%s on %s is not supported on GPU", ctx->node->op,
             psim_dtype_name(a->dtype));
        return NULL;
    }
    GError *err = NULL;
    PsimTensor *out = ctx->alloc(ctx, e->compare ? PSIM_DTYPE_BOOL : a->dtype, rank, dims, &err);
    if (!out) {
        KERR(ctx, error, "cannot allocate its output: %s", err->message);
        if (error && *error)
            (*error)->code = PSIM_ERROR_RUNTIME;
        g_error_free(err);
        return NULL;
    }
    int rc = psim__cuda_ew(psim__cuda_dev(ctx)->stream, e->code, ct, out->n_elems, &g, pa, pb,
                           NULL, out->data, 0, 0);
    if (rc) {
        psim_tensor_unref(out);
        launch(ctx, error, rc, "elementwise kernel");
        return NULL;
    }
    return out;
}

static void set_out(PsimKernelCtx *ctx, int32_t k, PsimTensor *t)
{
    if (ctx->outputs[k])
        psim_tensor_unref(ctx->outputs[k]);
    ctx->outputs[k] = t;
}

static gboolean run_ew(PsimKernelCtx *ctx, GError **error)
{
    const EwOp *e = ew_find(ctx->node->op);
    if (!e || !psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    PsimTensor *x = ctx->inputs[0];
    if (e->code == PSIM_CE_WHERE) {
        if (!psim__cpu_need(ctx, 3, error))
            return FALSE;
        PsimTensor *c = ctx->inputs[0], *a = ctx->inputs[1], *b = ctx->inputs[2];
        if (c->dtype != PSIM_DTYPE_BOOL || a->dtype != b->dtype || ctype(a->dtype) == CT_NONE) {
            KERR(ctx, error, "Where needs a bool condition and two branches of one dtype");
            return FALSE;
        }
        int32_t r1, r2;
        int64_t d1[PSIM_CPU_MAX_RANK], d2[PSIM_CPU_MAX_RANK];
        if (!psim__cpu_bcast_shape(ctx, c->rank, c->dims, a->rank, a->dims, &r1, d1, error) ||
            !psim__cpu_bcast_shape(ctx, r1, d1, b->rank, b->dims, &r2, d2, error))
            return FALSE;
        PsimCudaBcast g;
        if (!bcast_geom(ctx, 3, ctx->inputs, r2, d2, &g, error))
            return FALSE;
        const void *pc = psim__cuda_in(ctx, 0, error), *pa = pc ? psim__cuda_in(ctx, 1, error) : NULL,
                   *pb = pa ? psim__cuda_in(ctx, 2, error) : NULL;
        if (!pb)
            return FALSE;
        PsimTensor *out = psim__cpu_out(ctx, 0, a->dtype, r2, d2, error);
        if (!out)
            return FALSE;
        return launch(ctx, error,
                      psim__cuda_ew(d->stream, PSIM_CE_WHERE, ctype(a->dtype), out->n_elems, &g,
                                    pc, pa, pb, out->data, 0, 0),
                      "Where kernel");
    }
    if (e->code >= PSIM_CE_SQRT) {
        double lo = -G_MAXFLOAT, hi = G_MAXFLOAT;
        if (e->code == PSIM_CE_CLIP) {
            lo = psim_node_attr_float(ctx->node, "min", -G_MAXFLOAT);
            hi = psim_node_attr_float(ctx->node, "max", G_MAXFLOAT);
            for (int32_t k = 1; k <= 2; k++) {
                PsimTensor *t = psim__cpu_in(ctx, k);
                if (!t)
                    continue;
                g_autoptr(PsimTensor) h = psim__cuda_to_host(d, t, error);
                if (!h)
                    return FALSE;
                if (h->n_elems != 1) {
                    KERR(ctx, error, "Clip bound %d must be a scalar", k);
                    return FALSE;
                }
                *(k == 1 ? &lo : &hi) = psim_tensor_get_f64(h, 0);
            }
        }
        int ct = ctype(x->dtype);
        if (ct != PSIM_CT_F32 && !(e->code == PSIM_CE_NEG && (ct == PSIM_CT_I64 || ct == PSIM_CT_I32))) {
            KERR(ctx, error, "%s on %s is not supported on GPU", ctx->node->op,
                 psim_dtype_name(x->dtype));
            return FALSE;
        }
        const void *px = psim__cuda_in(ctx, 0, error);
        if (!px)
            return FALSE;
        PsimTensor *out = psim__cpu_out(ctx, 0, x->dtype, x->rank, x->dims, error);
        if (!out)
            return FALSE;
        return launch(ctx, error,
                      psim__cuda_ew(d->stream, e->code, ct, out->n_elems, NULL, px, NULL, NULL,
                                    out->data, lo, hi),
                      "unary kernel");
    }
    /* Binary and variadic (Sum, Max, Min): folded left to right. */
    if (!psim__cpu_need(ctx, ctx->n_inputs >= 2 ? 2 : 1, error))
        return FALSE;
    const void *pacc = psim__cuda_in(ctx, 0, error);
    if (!pacc)
        return FALSE;
    PsimTensor *acc = psim_tensor_ref(x);
    if (ctx->n_inputs == 1) { /* Sum/Max/Min of one input: a copy */
        PsimTensor *out = psim__cpu_out(ctx, 0, x->dtype, x->rank, x->dims, error);
        psim_tensor_unref(acc);
        if (!out)
            return FALSE;
        PSIM_CUDA_CHECK(ctx, error, cudaMemcpyAsync(out->data, pacc, x->nbytes,
                                                    cudaMemcpyDeviceToDevice, d->stream));
        return TRUE;
    }
    for (int32_t k = 1; k < ctx->n_inputs; k++) {
        PsimTensor *b = psim__cpu_in(ctx, k);
        const void *pb = b ? psim__cuda_in(ctx, k, error) : NULL;
        PsimTensor *r = pb ? binary(ctx, e, acc, pacc, b, pb, error) : NULL;
        psim_tensor_unref(acc);
        if (!r) {
            if (!b)
                KERR(ctx, error, "%s needs input %d", ctx->node->op, k);
            return FALSE;
        }
        acc = r;
        pacc = r->data;
    }
    set_out(ctx, 0, acc);
    return TRUE;
}

static gboolean run_cast(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0];
    PsimDType to = (PsimDType)psim_node_attr_int(ctx->node, "to", PSIM_DTYPE_UNDEFINED);
    if (ctype(x->dtype) == CT_NONE || ctype(to) == CT_NONE) {
        KERR(ctx, error, "Cast from %s to %s is not supported on GPU", psim_dtype_name(x->dtype),
             psim_dtype_name(to));
        return FALSE;
    }
    const void *px = psim__cuda_in(ctx, 0, error);
    if (!px)
        return FALSE;
    PsimTensor *out = psim__cpu_out(ctx, 0, to, x->rank, x->dims, error);
    if (!out)
        return FALSE;
    if (to == x->dtype) {
        PSIM_CUDA_CHECK(ctx, error, cudaMemcpyAsync(out->data, px, x->nbytes,
                                                    cudaMemcpyDeviceToDevice,
                                                    psim__cuda_dev(ctx)->stream));
        return TRUE;
    }
    return launch(ctx, error,
                  psim__cuda_cast(psim__cuda_dev(ctx)->stream, ctype(x->dtype), ctype(to),
                                  x->n_elems, px, out->data),
                  "Cast kernel");
}

/* --- Host-side CPU kernels on shapes -------------------------------------------------------- */

/* Runs the CPU kernel of the node with `in` as inputs and host allocation. */
static gboolean run_cpu(PsimKernelCtx *ctx, PsimTensor **in, PsimTensor **out, GError **error)
{
    const PsimKernelDef *k = psim_kernel_lookup(ctx->node->op, "CPU",
                                                in[0] ? in[0]->dtype : PSIM_DTYPE_UNDEFINED);
    if (!k) {
        KERR(ctx, error, "no CPU kernel to compute %s's shapes", ctx->node->op);
        return FALSE;
    }
    PsimKernelCtx h = *ctx;
    h.inputs = in;
    h.outputs = out;
    h.device_type = "CPU";
    h.alloc = host_alloc;
    h.alloc_uninit = NULL; /* host tensors: host_alloc only */
    h.workspace = NULL;
    h.workspace_bytes = 0;
    h.state = NULL;
    gboolean ok = TRUE;
    if (k->prepare)
        ok = k->prepare(ctx->graph, ctx->node, NULL, &h.state, error);
    if (ok && k->workspace) {
        h.workspace_bytes = k->workspace(ctx->graph, ctx->node);
        h.workspace = h.workspace_bytes ? g_malloc0(h.workspace_bytes) : NULL;
    }
    if (ok)
        ok = k->run(&h, error);
    g_free(h.workspace);
    if (k->release)
        k->release(h.state);
    return ok;
}

/* Views and Shape/Size: the CPU kernel on the device tensor (input 0), integer inputs on host. */
static gboolean run_view(PsimKernelCtx *ctx, GError **error)
{
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    g_autofree PsimTensor **in = g_new0(PsimTensor *, ctx->n_inputs + 1);
    gboolean ok = TRUE;
    for (int32_t k = 0; k < ctx->n_inputs && ok; k++) {
        PsimTensor *t = ctx->inputs[k];
        if (!t)
            continue;
        in[k] = k == 0 ? psim_tensor_ref(t) : psim__cuda_to_host(d, t, error);
        ok = in[k] != NULL;
    }
    if (ok)
        ok = run_cpu(ctx, in, ctx->outputs, error);
    for (int32_t k = 0; k < ctx->n_inputs; k++)
        if (in[k])
            psim_tensor_unref(in[k]);
    return ok;
}

/* ConstantOfShape: the CPU kernel on the host, then uploaded. */
static gboolean run_host_then_upload(PsimKernelCtx *ctx, GError **error)
{
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    g_autofree PsimTensor **in = g_new0(PsimTensor *, ctx->n_inputs + 1);
    g_autofree PsimTensor **out = g_new0(PsimTensor *, ctx->n_outputs + 1);
    gboolean ok = TRUE;
    for (int32_t k = 0; k < ctx->n_inputs && ok; k++)
        if (ctx->inputs[k])
            ok = (in[k] = psim__cuda_to_host(d, ctx->inputs[k], error)) != NULL;
    if (ok)
        ok = run_cpu(ctx, in, out, error);
    for (int32_t k = 0; k < ctx->n_outputs && ok; k++) {
        if (!out[k])
            continue;
        PsimTensor *o = psim__cpu_out(ctx, k, out[k]->dtype, out[k]->rank, out[k]->dims, error);
        if (!o)
            ok = FALSE;
        else if (o->nbytes) {
            cudaError_t ce = cudaMemcpyAsync(o->data, out[k]->data, o->nbytes,
                                             cudaMemcpyHostToDevice, d->stream);
            if (ce == cudaSuccess)
                ce = cudaStreamSynchronize(d->stream); /* the host buffer goes away below */
            if (ce != cudaSuccess)
                ok = psim__cuda_fail(ctx, error, "CUDA", "cudaMemcpyAsync", cudaGetErrorString(ce));
        }
    }
    for (int32_t k = 0; k < ctx->n_inputs; k++)
        if (in[k])
            psim_tensor_unref(in[k]);
    for (int32_t k = 0; k < ctx->n_outputs; k++)
        if (out[k])
            psim_tensor_unref(out[k]);
    return ok;
}

/* --- Index-map data movement ---------------------------------------------------------------- */

typedef struct {
    char *key;              /* input shapes and parameter values the maps were made for */
    int32_t n_out;
    PsimTensor **maps;      /* device int64 maps, one per output */
} MapState;

static gboolean map_prepare(const PsimGraph *g, const PsimNode *n, void *device, void **state,
                            GError **error)
{
    (void)g;
    (void)device;
    (void)error;
    MapState *s = g_new0(MapState, 1);
    s->n_out = n->n_outputs;
    s->maps = g_new0(PsimTensor *, MAX(n->n_outputs, 1));
    *state = s;
    return TRUE;
}

static void map_release(void *state)
{
    MapState *s = state;
    if (!s)
        return;
    for (int32_t k = 0; k < s->n_out; k++)
        if (s->maps[k])
            psim_tensor_unref(s->maps[k]);
    g_free(s->maps);
    g_free(s->key);
    g_free(s);
}

/* Which inputs carry data that moves (the rest are parameters read on the host). */
static gboolean is_data_input(const char *op, int32_t k)
{
    if (!strcmp(op, "Concat"))
        return TRUE;
    return k == 0;
}

static gboolean run_map(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    MapState *s = ctx->state;
    const char *op = ctx->node->op;
    PsimTensor *x = ctx->inputs[0];
    size_t es = psim__cpu_esize(x->dtype);
    if (!s || !es || es > 8 || (es & (es - 1))) {
        KERR(ctx, error, "%s on %s is not supported on GPU", op, psim_dtype_name(x->dtype));
        return FALSE;
    }
    int32_t ni = ctx->n_inputs;
    g_autofree PsimTensor **hin = g_new0(PsimTensor *, ni + 1);
    g_autoptr(GString) key = g_string_new(NULL);
    gboolean ok = TRUE, fresh = FALSE;
    const void *pad_dev = NULL;
    int32_t n_src = 0;
    for (int32_t k = 0; k < ni && ok; k++) {
        PsimTensor *t = ctx->inputs[k];
        g_string_append_printf(key, "|%d:", k);
        if (!t)
            continue;
        for (int32_t i = 0; i < t->rank; i++)
            g_string_append_printf(key, "%" G_GINT64_FORMAT ",", t->dims[i]);
        if (is_data_input(op, k)) {
            if (t->dtype != x->dtype) {
                KERR(ctx, error, "input %d has dtype %s, input 0 %s", k,
                     psim_dtype_name(t->dtype), psim_dtype_name(x->dtype));
                ok = FALSE;
            }
            n_src = k + 1;
        } else if (!strcmp(op, "Pad") && k == 2) {
            /* The pad value: the map marks padded elements with 0; the kernel reads the value. */
            if (t->n_elems != 1 && t->n_elems != 0) {
                KERR(ctx, error, "Pad's constant_value must be a scalar");
                ok = FALSE;
            } else if (t->n_elems == 1 && !(pad_dev = psim__cuda_in(ctx, 2, error)))
                ok = FALSE;
        } else {
            if (!(hin[k] = psim__cuda_to_host(d, t, error)))
                ok = FALSE;
            else if (t->n_elems <= 65536)
                for (int64_t i = 0; i < t->n_elems; i++)
                    g_string_append_printf(key, "%" G_GINT64_FORMAT ",",
                                           psim_tensor_get_i64(hin[k], i));
            else
                fresh = TRUE; /* too long to key on: remake the map */
        }
    }
    if (ok && (!s->key || fresh || strcmp(s->key, key->str))) {
        /* (Re)make the maps: index tensors in, the CPU kernel, int64 maps out. */
        for (int32_t k = 0; k < n_src && ok; k++) {
            PsimTensor *t = ctx->inputs[k];
            if (!t || !is_data_input(op, k))
                continue;
            if (t->n_elems >= ((int64_t)1 << 40) || k >= (1 << 20)) {
                KERR(ctx, error, "input %d is too large for the GPU index map", k);
                ok = FALSE;
                break;
            }
            hin[k] = psim_tensor_new(PSIM_DTYPE_INT64, t->rank, t->dims, error);
            if (!hin[k]) {
                ok = FALSE;
                break;
            }
            int64_t *v = hin[k]->data;
            for (int64_t i = 0; i < t->n_elems; i++)
                v[i] = (((int64_t)k << 40) | i) + 1;
        }
        if (ok && !strcmp(op, "Pad") && ni > 2 && ctx->inputs[2]) {
            int64_t one = 1;
            hin[2] = psim_tensor_new(PSIM_DTYPE_INT64, 0, &one, error); /* 0: "the pad value" */
            ok = hin[2] != NULL;
        }
        g_autofree PsimTensor **hout = g_new0(PsimTensor *, ctx->n_outputs + 1);
        if (ok)
            ok = run_cpu(ctx, hin, hout, error);
        for (int32_t k = 0; k < ctx->n_outputs && ok; k++) {
            if (s->maps[k])
                psim_tensor_unref(s->maps[k]);
            s->maps[k] = NULL;
            if (!hout[k])
                continue;
            GError *err = NULL;
            PsimTensor *m = ctx->alloc(ctx, PSIM_DTYPE_INT64, hout[k]->rank, hout[k]->dims, &err);
            if (!m) {
                KERR(ctx, error, "cannot allocate its index map: %s", err->message);
                if (error && *error)
                    (*error)->code = PSIM_ERROR_RUNTIME;
                g_error_free(err);
                ok = FALSE;
                break;
            }
            s->maps[k] = m;
            cudaError_t ce = m->nbytes ? cudaMemcpyAsync(m->data, hout[k]->data, m->nbytes,
                                                         cudaMemcpyHostToDevice, d->stream)
                                       : cudaSuccess;
            if (ce == cudaSuccess)
                ce = cudaStreamSynchronize(d->stream);
            if (ce != cudaSuccess)
                ok = psim__cuda_fail(ctx, error, "CUDA", "cudaMemcpyAsync (index map)",
                                     cudaGetErrorString(ce));
        }
        for (int32_t k = 0; k < ctx->n_outputs; k++)
            if (hout[k])
                psim_tensor_unref(hout[k]);
        g_free(s->key);
        s->key = ok ? g_strdup(key->str) : NULL;
    }
    for (int32_t k = 0; k < ni; k++)
        if (hin[k])
            psim_tensor_unref(hin[k]);
    if (!ok)
        return FALSE;
    /* The sources' device pointers, then one gather per output. */
    g_autofree const void **srcs = g_new0(const void *, MAX(n_src, 1));
    for (int32_t k = 0; k < n_src; k++)
        if (ctx->inputs[k] && is_data_input(op, k) && !(srcs[k] = psim__cuda_in(ctx, k, error)))
            return FALSE;
    GError *err = NULL;
    PsimTensor *dsrc = ctx->alloc(ctx, PSIM_DTYPE_INT64, 1, (int64_t[]){MAX(n_src, 1)}, &err);
    if (!dsrc) {
        KERR(ctx, error, "cannot allocate: %s", err->message);
        if (error && *error)
            (*error)->code = PSIM_ERROR_RUNTIME;
        g_error_free(err);
        return FALSE;
    }
    cudaError_t ce = cudaMemcpyAsync(dsrc->data, srcs, sizeof(void *) * (size_t)MAX(n_src, 1),
                                     cudaMemcpyHostToDevice, d->stream);
    for (int32_t k = 0; k < ctx->n_outputs && ce == cudaSuccess; k++) {
        PsimTensor *m = s->maps[k];
        if (!m)
            continue;
        PsimTensor *out = psim__cpu_out(ctx, k, x->dtype, m->rank, m->dims, error);
        if (!out) {
            psim_tensor_unref(dsrc);
            return FALSE;
        }
        ce = (cudaError_t)psim__cuda_gather_map(d->stream, es, out->n_elems, m->data,
                                                (const void *const *)dsrc->data, n_src, pad_dev,
                                                out->data);
    }
    /* srcs is a host buffer of this call: the copy must be done before it goes (pageable
     * copies are staged before cudaMemcpyAsync returns, but say so explicitly). */
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(d->stream);
    psim_tensor_unref(dsrc);
    if (ce != cudaSuccess)
        return psim__cuda_fail(ctx, error, "CUDA", "index-map gather", cudaGetErrorString(ce));
    return TRUE;
}

/* --- ReduceMean / ReduceSum ----------------------------------------------------------------- */

static gboolean run_reduce(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 1, error))
        return FALSE;
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    PsimTensor *x = ctx->inputs[0];
    if (x->dtype != PSIM_DTYPE_FLOAT32 || x->rank > PSIM_CUDA_MAX_RANK) {
        KERR(ctx, error, "%s on GPU needs float32 of rank at most %d", ctx->node->op,
             PSIM_CUDA_MAX_RANK);
        return FALSE;
    }
    /* Axes from input 1 (opset 13+/18+) or the attribute. */
    g_autoptr(PsimTensor) hax = NULL;
    PsimTensor *ax_in = psim__cpu_in(ctx, 1);
    if (ax_in && !(hax = psim__cuda_to_host(d, ax_in, error)))
        return FALSE;
    PsimTensor *hin[2] = {x, hax};
    PsimKernelCtx h = *ctx;
    h.inputs = hin;
    g_autofree int64_t *axes = NULL;
    int32_t n_axes;
    if (!psim__cpu_ints(&h, 1, "axes", &axes, &n_axes, error))
        return FALSE;
    gboolean keep = psim_node_attr_int(ctx->node, "keepdims", 1) != 0;
    gboolean noop = psim_node_attr_int(ctx->node, "noop_with_empty_axes", 0) != 0;
    unsigned char red[PSIM_CUDA_MAX_RANK] = {0};
    if (n_axes <= 0) {
        for (int32_t i = 0; i < x->rank; i++)
            red[i] = !noop;
    } else
        for (int32_t i = 0; i < n_axes; i++) {
            int32_t a;
            if (!psim__cpu_axis(ctx, axes[i], x->rank, &a, error))
                return FALSE;
            red[a] = 1;
        }
    int64_t od[PSIM_CUDA_MAX_RANK], st[PSIM_CUDA_MAX_RANK];
    int32_t orank = 0;
    int64_t s = 1;
    for (int32_t i = x->rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= x->dims[i];
    }
    for (int32_t i = 0; i < x->rank; i++)
        if (!red[i])
            od[orank++] = x->dims[i];
        else if (keep)
            od[orank++] = 1;
    const void *px = psim__cuda_in(ctx, 0, error);
    if (!px)
        return FALSE;
    PsimTensor *out = psim__cpu_out(ctx, 0, x->dtype, orank, od, error);
    if (!out)
        return FALSE;
    return launch(ctx, error,
                  psim__cuda_reduce(d->stream, !strcmp(ctx->node->op, "ReduceMean"),
                                    out->n_elems, x->rank, x->dims, st, red, px, out->data),
                  "reduce kernel");
}

/* --- LayerNormalization ---------------------------------------------------------------------- */

static gboolean run_layernorm(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 2, error))
        return FALSE;
    PsimTensor *x = ctx->inputs[0], *sc = ctx->inputs[1], *b = psim__cpu_in(ctx, 2);
    int32_t axis;
    if (x->dtype != PSIM_DTYPE_FLOAT32 ||
        !psim__cpu_axis(ctx, psim_node_attr_int(ctx->node, "axis", -1), x->rank, &axis, error)) {
        if (error && !*error)
            KERR(ctx, error, "LayerNormalization on GPU needs float32");
        return FALSE;
    }
    int64_t rows = 1, cols = 1;
    for (int32_t i = 0; i < x->rank; i++)
        *(i < axis ? &rows : &cols) *= x->dims[i];
    if ((sc->n_elems != cols && sc->n_elems != 1) || (b && b->n_elems != cols && b->n_elems != 1)) {
        KERR(ctx, error, "Scale and B must have the normalized shape (%" G_GINT64_FORMAT
             " elements)", cols);
        return FALSE;
    }
    if (psim__cpu_wants(ctx, 1) || psim__cpu_wants(ctx, 2)) {
        KERR(ctx, error, "LayerNormalization's Mean and InvStdDev outputs are not supported on GPU");
        return FALSE;
    }
    const void *px = psim__cuda_in(ctx, 0, error), *ps = px ? psim__cuda_in(ctx, 1, error) : NULL,
               *pb = ps && b ? psim__cuda_in(ctx, 2, error) : NULL;
    if (!ps || (b && !pb))
        return FALSE;
    PsimTensor *out = psim__cpu_out(ctx, 0, x->dtype, x->rank, x->dims, error);
    if (!out)
        return FALSE;
    float eps = (float)psim_node_attr_float(ctx->node, "epsilon", 1e-5);
    return launch(ctx, error,
                  psim__cuda_layernorm(psim__cuda_dev(ctx)->stream, rows, cols, px, ps,
                                       sc->n_elems, pb, b ? b->n_elems : 0, eps, out->data),
                  "LayerNormalization kernel");
}

/* --- Registration ---------------------------------------------------------------------------- */

#define GPU(OP, NAME, DESC, RUN)                                                              \
    {.op = OP, .device_type = "GPU", .dtype = PSIM_DTYPE_UNDEFINED, .name = NAME,            \
     .description = DESC, .async = TRUE, .run = RUN}
#define GPU_MAP(OP, DESC)                                                                     \
    {.op = OP, .device_type = "GPU", .dtype = PSIM_DTYPE_UNDEFINED, .name = "cuda-imap",     \
     .description = DESC, .async = TRUE, .prepare = map_prepare, .release = map_release,     \
     .run = run_map}

static const PsimKernelDef defs[] = {
    GPU("Add", "cuda-ew", "elementwise, numpy broadcasting", run_ew),
    GPU("Sub", "cuda-ew", "elementwise, numpy broadcasting", run_ew),
    GPU("Mul", "cuda-ew", "elementwise, numpy broadcasting", run_ew),
    GPU("Div", "cuda-ew", "elementwise, numpy broadcasting", run_ew),
    GPU("Pow", "cuda-ew", "elementwise, numpy broadcasting", run_ew),
    GPU("Max", "cuda-ew", "elementwise, variadic", run_ew),
    GPU("Min", "cuda-ew", "elementwise, variadic", run_ew),
    GPU("Sum", "cuda-ew", "elementwise, variadic", run_ew),
    GPU("Equal", "cuda-ew", "elementwise comparison", run_ew),
    GPU("Less", "cuda-ew", "elementwise comparison", run_ew),
    GPU("Greater", "cuda-ew", "elementwise comparison", run_ew),
    GPU("Where", "cuda-ew", "select, numpy broadcasting", run_ew),
    GPU("Sqrt", "cuda-ew", "elementwise", run_ew),
    GPU("Neg", "cuda-ew", "elementwise", run_ew),
    GPU("Exp", "cuda-ew", "elementwise", run_ew),
    GPU("Log", "cuda-ew", "elementwise", run_ew),
    GPU("Relu", "cuda-ew", "elementwise", run_ew),
    GPU("Sigmoid", "cuda-ew", "elementwise", run_ew),
    GPU("Tanh", "cuda-ew", "elementwise", run_ew),
    GPU("Erf", "cuda-ew", "elementwise", run_ew),
    GPU("Abs", "cuda-ew", "elementwise", run_ew),
    GPU("Clip", "cuda-ew", "elementwise clamp", run_ew),
    GPU("Cast", "cuda-cast", "dtype conversion", run_cast),
    GPU("Identity", "cuda-view", "passes its input through (no copy)", run_view),
    GPU("Dropout", "cuda-view", "inference Dropout (no copy)", run_view),
    GPU("Reshape", "cuda-view", "reshape (no copy)", run_view),
    GPU("Flatten", "cuda-view", "flatten to 2-D (no copy)", run_view),
    GPU("Squeeze", "cuda-view", "drop size-1 dims (no copy)", run_view),
    GPU("Unsqueeze", "cuda-view", "insert size-1 dims (no copy)", run_view),
    GPU("Shape", "cuda-shape", "the input's shape (host int64)", run_view),
    GPU("Size", "cuda-shape", "the input's element count (host int64)", run_view),
    GPU("ConstantOfShape", "cuda-fill", "a filled tensor of a given shape", run_host_then_upload),
    GPU("Const", "cuda-const", "a constant (made on the host, uploaded)", run_host_then_upload),
    GPU("Constant", "cuda-const", "ONNX Constant (made on the host, uploaded)",
        run_host_then_upload),
    GPU_MAP("Transpose", "permute dims (index-map gather)"),
    GPU_MAP("Slice", "strided slice (index-map gather)"),
    GPU_MAP("Pad", "constant, edge and reflect padding (index-map gather)"),
    GPU_MAP("Expand", "broadcast to a shape (index-map gather)"),
    GPU_MAP("Tile", "repeat along dims (index-map gather)"),
    GPU_MAP("Concat", "join along an axis (index-map gather)"),
    GPU_MAP("Split", "split along an axis (index-map gather)"),
    GPU_MAP("Gather", "take along an axis (index-map gather)"),
    GPU("ReduceMean", "cuda-reduce", "mean over axes", run_reduce),
    GPU("ReduceSum", "cuda-reduce", "sum over axes", run_reduce),
    GPU("LayerNormalization", "cuda-layernorm", "normalization over trailing dims", run_layernorm),
};

void psim__cuda_register_ops(void) { psim__kernels_add(defs, G_N_ELEMENTS(defs)); }
