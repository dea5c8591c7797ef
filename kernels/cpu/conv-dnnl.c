/* Conv on oneDNN (Debian's libdnnl): 2-D float32 convolutions with a kernel larger than 1x1 and
 * more than one input channel per group (3x3, 5x5, 7x7 layers; pointwise and depthwise ones stay
 * on kernels/cpu/conv.c, where they measured as fast or faster). oneDNN's direct convolution
 * works on channel-blocked tensors, so the input is reordered into its layout, and the output
 * back to NCHW, at every call; the weights are reordered once per node while the executor holds
 * them constant (PsimKernelCtx.constant_inputs), and at every call otherwise (fed, trained). On this project's AVX2 host, reorders
 * included, it ran 1.5-2x faster than banded im2col + sgemm on GoogLeNet's and DenseNet's 3x3
 * layers (docs/perf.md).
 *
 * Each call runs on the calling thread only: oneDNN's OpenMP team is set to one thread there
 * (each executor device is one thread, as the cost model assumes), its scratchpad is our thread
 * scratch (user mode), and each thread has its own stream. A shape oneDNN cannot do, or can do only
 * with its reference code, falls back to the im2col path (run_conv answers "not taken"). */
#include "cpu-private.h"

#include <math.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#define DNNL_OK(x) ((x) == dnnl_success)

typedef struct { /* all int64_t: no padding bytes for memcmp to read */
    int64_t N, C, H, W, M, kh, kw, sh, sw, dh, dw, ph, pw, Ho, Wo, group, bias;
    int64_t post, post_a, post_b; /* the eltwise post-op (an algorithm, 0 none) and its bits */
} ConvKey;

/* FusedConv's activations oneDNN applies as its output is written (a post-op), with the same
 * values as kernels/cpu/act.c's loops; the others run after, over the output. */
static gboolean post_op(const PsimAct *act, dnnl_alg_kind_t *alg, float *alpha, float *beta)
{
    *alpha = *beta = 0.0f;
    switch (act ? act->kind : PSIM_ACT_NONE) {
    case PSIM_ACT_RELU: *alg = dnnl_eltwise_relu; return TRUE;
    case PSIM_ACT_LEAKY_RELU: *alg = dnnl_eltwise_relu, *alpha = act->a; return TRUE;
    case PSIM_ACT_CLIP:
        if (!isfinite(act->a) || !isfinite(act->b))
            return FALSE;
        *alg = dnnl_eltwise_clip_v2, *alpha = act->a, *beta = act->b;
        return TRUE;
    default: return FALSE;
    }
}

/* Primitives made for one shape (key); remade when a call brings another. */
typedef struct {
    gboolean have;    /* primitives made for key */
    gboolean refused; /* oneDNN cannot do key well: use the fallback */
    ConvKey key;
} Keyed;

struct PsimConvDnnl {
    Keyed k;
    dnnl_primitive_t conv, src_reorder, dst_reorder, w_reorder; /* reorders NULL when plain */
    dnnl_memory_desc_t src_plain, dst_plain, w_plain, b_md, src_md, dst_md, w_md, pad_md;
    size_t src_bytes, dst_bytes, w_bytes, pad_bytes;
    void *w_blocked;      /* reordered weights (NULL when the plain layout is used) */
    const void *w_source; /* the constant weights they were made from */
};

static dnnl_engine_t engine(void)
{
    static gsize once = 0;
    static dnnl_engine_t e = NULL;
    if (g_once_init_enter(&once)) {
        if (!DNNL_OK(dnnl_engine_create(&e, dnnl_cpu, 0)))
            e = NULL;
        g_once_init_leave(&once, 1);
    }
    return e;
}

static void stream_free(gpointer s)
{
    dnnl_stream_destroy(s);
}

static GPrivate stream_key = G_PRIVATE_INIT(stream_free);

/* This thread's stream; the first call also makes oneDNN's OpenMP team here one thread. */
static dnnl_stream_t stream(void)
{
    dnnl_stream_t s = g_private_get(&stream_key);
    if (!s && engine()) {
        psim__dnnl_one_thread();
        if (!DNNL_OK(dnnl_stream_create(&s, engine(), dnnl_stream_default_flags)))
            return NULL;
        g_private_set(&stream_key, s);
    }
    return s;
}

static void drop_primitives(PsimConvDnnl *st)
{
    dnnl_primitive_t *p[] = {&st->conv, &st->src_reorder, &st->dst_reorder, &st->w_reorder};
    for (size_t i = 0; i < G_N_ELEMENTS(p); i++)
        if (*p[i]) {
            dnnl_primitive_destroy(*p[i]);
            *p[i] = NULL;
        }
    free(st->w_blocked);
    st->w_blocked = NULL;
    st->w_source = NULL;
    st->k.have = st->k.refused = FALSE;
}

void psim__conv_dnnl_free(PsimConvDnnl *st)
{
    if (!st)
        return;
    drop_primitives(st);
    g_free(st);
}

void psim__conv_dnnl_memory(const PsimConvDnnl *st, const void **p, size_t *bytes)
{
    *p = st && st->w_source ? st->w_blocked : NULL;
    *bytes = *p ? st->w_bytes : 0;
}

PsimConvDnnl *psim__conv_dnnl_new(void)
{
    return g_new0(PsimConvDnnl, 1);
}

/* A reorder from `from` to `to`, or NULL (and TRUE) when the two are the same layout. */
static gboolean reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                        dnnl_primitive_t *r)
{
    *r = NULL;
    if (dnnl_memory_desc_equal(from, to))
        return TRUE;
    dnnl_primitive_desc_t pd = NULL;
    gboolean ok = DNNL_OK(dnnl_reorder_primitive_desc_create(&pd, from, engine(), to, engine(), NULL)) &&
                  DNNL_OK(dnnl_primitive_create(r, pd));
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* A convolution's shape for oneDNN: strides, dilations and pads, its tensors in NCHW / (G)OIHW
 * (src, dst, w) and in any layout (for the primitive to choose). */
typedef struct {
    dnnl_dims_t strides, dil, pl, pr;
    dnnl_memory_desc_t src_any, dst_any, w_any;
} Descs;

static gboolean descs(const ConvKey *k, Descs *d, dnnl_memory_desc_t *src, dnnl_memory_desc_t *dst,
                      dnnl_memory_desc_t *w)
{
    dnnl_dims_t sd = {k->N, k->C, k->H, k->W}, dd = {k->N, k->M, k->Ho, k->Wo};
    dnnl_dims_t wd = {k->M, k->C / k->group, k->kh, k->kw};
    dnnl_dims_t gwd = {k->group, k->M / k->group, k->C / k->group, k->kh, k->kw};
    *d = (Descs){.strides = {k->sh, k->sw}, .dil = {k->dh - 1, k->dw - 1}, .pl = {k->ph, k->pw},
                 /* the end pads that give exactly Ho x Wo (ONNX's may be larger; the excess is
                  * unused) */
                 .pr = {(k->Ho - 1) * k->sh + (k->kh - 1) * k->dh + 1 - k->H - k->ph,
                        (k->Wo - 1) * k->sw + (k->kw - 1) * k->dw + 1 - k->W - k->pw}};
    gboolean grouped = k->group > 1;
    return DNNL_OK(dnnl_memory_desc_init_by_tag(src, 4, sd, dnnl_f32, dnnl_nchw)) &&
           DNNL_OK(dnnl_memory_desc_init_by_tag(dst, 4, dd, dnnl_f32, dnnl_nchw)) &&
           DNNL_OK(dnnl_memory_desc_init_by_tag(w, grouped ? 5 : 4, grouped ? gwd : wd, dnnl_f32,
                                                grouped ? dnnl_goihw : dnnl_oihw)) &&
           DNNL_OK(dnnl_memory_desc_init_by_tag(&d->src_any, 4, sd, dnnl_f32, dnnl_format_tag_any)) &&
           DNNL_OK(dnnl_memory_desc_init_by_tag(&d->dst_any, 4, dd, dnnl_f32, dnnl_format_tag_any)) &&
           DNNL_OK(dnnl_memory_desc_init_by_tag(&d->w_any, grouped ? 5 : 4, grouped ? gwd : wd,
                                                dnnl_f32, dnnl_format_tag_any));
}

/* Makes kd's primitives for key (make, after drop) when they were made for another or none;
 * FALSE when oneDNN refuses the shape or there is no stream. */
static gboolean keyed(Keyed *kd, const ConvKey *key, dnnl_stream_t s, void *st,
                      void (*drop)(void *), gboolean (*make)(void *))
{
    if (!kd->have || memcmp(key, &kd->key, sizeof *key)) {
        drop(st);
        kd->key = *key;
        kd->have = TRUE;
        kd->refused = !s || !make(st);
    }
    return s && !kd->refused;
}

/* A primitive descriptor for desc with our scratchpad and post-ops po (NULL: none); hint: the
 * forward one, for a backward desc. NULL when oneDNN offers only its reference code for it (or
 * nothing). */
static dnnl_primitive_desc_t fast_pd(const void *desc, const_dnnl_post_ops_t po,
                                     const_dnnl_primitive_desc_t hint)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    gboolean ok = DNNL_OK(dnnl_primitive_attr_create(&attr)) &&
                  DNNL_OK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) &&
                  (!po || DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po))) &&
                  DNNL_OK(dnnl_primitive_desc_create(&pd, desc, attr, engine(), hint));
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    const char *impl = NULL;
    ok = ok && DNNL_OK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl)) && impl &&
         !g_str_has_prefix(impl, "ref");
    if (!ok && pd) {
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    return pd;
}

/* The convolution and its reorders for st->k.key; FALSE when oneDNN offers only its reference
 * code (or nothing) for it. */
static gboolean make_primitives(PsimConvDnnl *st)
{
    const ConvKey *k = &st->k.key;
    Descs d;
    dnnl_dims_t bd = {k->M};
    if (!descs(k, &d, &st->src_plain, &st->dst_plain, &st->w_plain) ||
        !DNNL_OK(dnnl_memory_desc_init_by_tag(&st->b_md, 1, bd, dnnl_f32, dnnl_x)))
        return FALSE;
    dnnl_convolution_desc_t cd;
    if (!DNNL_OK(dnnl_dilated_convolution_forward_desc_init(
            &cd, dnnl_forward_inference, dnnl_convolution_direct, &d.src_any, &d.w_any,
            k->bias ? &st->b_md : NULL, &d.dst_any, d.strides, d.dil, d.pl, d.pr)))
        return FALSE;
    dnnl_post_ops_t po = NULL;
    gboolean ok = TRUE;
    if (k->post) {
        float pa, pb;
        memcpy(&pa, &k->post_a, sizeof pa);
        memcpy(&pb, &k->post_b, sizeof pb);
        ok = DNNL_OK(dnnl_post_ops_create(&po)) &&
             DNNL_OK(dnnl_post_ops_append_eltwise(po, 1.0f, (dnnl_alg_kind_t)k->post, pa, pb));
    }
    dnnl_primitive_desc_t pd = ok ? fast_pd(&cd, po, NULL) : NULL;
    if (po)
        dnnl_post_ops_destroy(po);
    /* A grouped convolution only through a direct kernel (kernels/cpu/conv.c, dnnl_takes): its
     * gemm-based one was slower than our im2col for groups of 4 to 16 channels. */
    const char *impl = NULL;
    if (pd && k->group > 1 &&
        (!DNNL_OK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl)) || !impl ||
         g_str_has_prefix(impl, "gemm"))) {
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    ok = pd != NULL;
    if (ok) {
        st->src_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
        st->dst_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
        st->w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        st->pad_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        st->src_bytes = dnnl_memory_desc_get_size(&st->src_md);
        st->dst_bytes = dnnl_memory_desc_get_size(&st->dst_md);
        st->w_bytes = dnnl_memory_desc_get_size(&st->w_md);
        st->pad_bytes = dnnl_memory_desc_get_size(&st->pad_md);
        ok = DNNL_OK(dnnl_primitive_create(&st->conv, pd)) &&
             reorder(&st->src_plain, &st->src_md, &st->src_reorder) &&
             reorder(&st->dst_md, &st->dst_plain, &st->dst_reorder) &&
             reorder(&st->w_plain, &st->w_md, &st->w_reorder);
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* Runs primitive p with up to 5 (argument, descriptor, data) triples. */
static gboolean execute(dnnl_primitive_t p, dnnl_stream_t s, int n, const int *args,
                        const dnnl_memory_desc_t *const *mds, void *const *data)
{
    dnnl_memory_t mem[5] = {NULL};
    dnnl_exec_arg_t ea[5];
    gboolean ok = TRUE;
    for (int i = 0; i < n && ok; i++) {
        ok = DNNL_OK(dnnl_memory_create(&mem[i], mds[i], engine(), data[i]));
        ea[i] = (dnnl_exec_arg_t){args[i], mem[i]};
    }
    ok = ok && DNNL_OK(dnnl_primitive_execute(p, s, n, ea)) && DNNL_OK(dnnl_stream_wait(s));
    for (int i = 0; i < n; i++)
        if (mem[i])
            dnnl_memory_destroy(mem[i]);
    return ok;
}

static gboolean run_reorder(dnnl_primitive_t r, dnnl_stream_t s, const dnnl_memory_desc_t *from,
                            const void *src, const dnnl_memory_desc_t *to, void *dst)
{
    const int args[] = {DNNL_ARG_FROM, DNNL_ARG_TO};
    const dnnl_memory_desc_t *mds[] = {from, to};
    void *data[] = {(void *)src, dst};
    return execute(r, s, 2, args, mds, data);
}

#define ALIGN64(b) (((b) + 63) & ~(size_t)63)

static void drop_cb(void *st)
{
    drop_primitives(st);
}

static gboolean make_cb(void *st)
{
    return make_primitives(st);
}

int psim__conv_dnnl_run(PsimConvDnnl *st, const PsimConvDnnlArgs *a, GError **error)
{
    PsimConvDnnl local = {0};
    if (!st) /* a kernel run without prepare (bench-kernels): primitives for this call only */
        st = &local;
    ConvKey key = {a->N, a->C, a->H, a->W, a->M, a->kh, a->kw, a->sh, a->sw, a->dh, a->dw, a->ph,
                   a->pw, a->Ho, a->Wo, a->group, a->b != NULL, 0, 0, 0};
    dnnl_alg_kind_t alg;
    float pa, pb;
    gboolean fused = post_op(a->act, &alg, &pa, &pb);
    if (fused) {
        uint32_t ua, ub;
        memcpy(&ua, &pa, sizeof ua);
        memcpy(&ub, &pb, sizeof ub);
        key.post = (int64_t)alg, key.post_a = ua, key.post_b = ub;
    }
    /* The stream first: it sets this thread's OpenMP team to one thread, which oneDNN reads
     * when it sizes a primitive's work split and scratchpad. */
    dnnl_stream_t s = stream();
    int taken = 0;
    if (!keyed(&st->k, &key, s, st, drop_cb, make_cb))
        goto out;
    /* Thread scratch: the blocked input, the blocked output, the weights when they are not
     * kept, oneDNN's scratchpad. */
    /* Weights the executor holds constant are reordered once and kept (keyed by their address
     * too); others (fed, trained) at every call. */
    gboolean keep_w = a->w_constant && st != &local && st->w_reorder;
    size_t need = ALIGN64(st->src_reorder ? st->src_bytes : 0) + ALIGN64(st->dst_reorder ? st->dst_bytes : 0) +
                  ALIGN64(st->w_reorder && !keep_w ? st->w_bytes : 0) + ALIGN64(st->pad_bytes);
    char *ws = need ? psim__cpu_scratch(need, error) : NULL;
    if (need && !ws) {
        taken = -1;
        goto out;
    }
    void *xb = (void *)a->x, *yb = a->y, *wb = (void *)a->w, *pad = NULL;
    if (st->src_reorder)
        xb = ws, ws += ALIGN64(st->src_bytes);
    if (st->dst_reorder)
        yb = ws, ws += ALIGN64(st->dst_bytes);
    if (st->w_reorder && !keep_w)
        wb = ws, ws += ALIGN64(st->w_bytes);
    if (st->pad_bytes)
        pad = ws;
    gboolean ok = TRUE;
    if (st->w_reorder) {
        if (keep_w) {
            if (!st->w_blocked || st->w_source != a->w) {
                free(st->w_blocked);
                /* 64-byte aligned, as oneDNN recommends for its vector loads */
                st->w_blocked = aligned_alloc(64, ALIGN64(st->w_bytes));
                if (!st->w_blocked) {
                    g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "out of memory for %zu bytes of convolution weights",
                                st->w_bytes);
                    taken = -1;
                    goto out;
                }
                st->w_source = NULL;
                ok = run_reorder(st->w_reorder, s, &st->w_plain, a->w, &st->w_md, st->w_blocked);
                if (ok)
                    st->w_source = a->w;
            }
            wb = st->w_blocked;
        } else
            ok = run_reorder(st->w_reorder, s, &st->w_plain, a->w, &st->w_md, wb);
    }
    if (ok && st->src_reorder)
        ok = run_reorder(st->src_reorder, s, &st->src_plain, a->x, &st->src_md, xb);
    if (ok) {
        int args[5] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD, DNNL_ARG_BIAS};
        const dnnl_memory_desc_t *mds[5] = {&st->src_md, &st->w_md, &st->dst_md, &st->pad_md, &st->b_md};
        void *data[5] = {xb, wb, yb, pad, (void *)a->b};
        ok = execute(st->conv, s, a->b ? 5 : 4, args, mds, data);
    }
    if (ok && st->dst_reorder)
        ok = run_reorder(st->dst_reorder, s, &st->dst_md, yb, &st->dst_plain, a->y);
    if (!ok) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "oneDNN failed to run the convolution");
        taken = -1;
        goto out;
    }
    if (!fused && a->act && a->act->kind != PSIM_ACT_NONE)
        psim__act_f32(a->act, a->y, a->y, a->N * a->M * a->Ho * a->Wo);
    taken = 1;
out:
    if (st == &local)
        drop_primitives(st);
    return taken;
}

/* ---------------------------------------------------------------------------------------- */
/* ConvGrad on oneDNN: dX by its backward-data convolution, dW by its backward-weights one, each
 * made with a forward (training) convolution of the same shape as its hint, as oneDNN asks. The
 * operands are reordered from NCHW into the layouts the primitives choose and the gradients back,
 * at every call (dY, X and W change every step). The cnn's training step at 28 x 28 and batch 64
 * spent 54% of its time in im2col + sgemm and sgemm + col2im for these layers. */

enum { GRAD_DATA, GRAD_WEIGHTS, GRAD_N };

typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_desc_t md[3], plain[3]; /* two inputs, then the output */
    dnnl_primitive_t re[3];             /* inputs: plain -> md; output: md -> plain; NULL same */
    size_t bytes[3];
    dnnl_memory_desc_t pad_md;
    size_t pad_bytes;
} GradPrim;

struct PsimConvGradDnnl {
    Keyed k;
    GradPrim p[GRAD_N];
};

PsimConvGradDnnl *psim__conv_grad_dnnl_new(void)
{
    return g_new0(PsimConvGradDnnl, 1);
}

static void grad_drop(PsimConvGradDnnl *st)
{
    for (int i = 0; i < GRAD_N; i++) {
        GradPrim *p = &st->p[i];
        if (p->prim)
            dnnl_primitive_destroy(p->prim);
        for (int k = 0; k < 3; k++)
            if (p->re[k])
                dnnl_primitive_destroy(p->re[k]);
        memset(p, 0, sizeof *p);
    }
    st->k.have = st->k.refused = FALSE;
}

static void grad_drop_cb(void *st)
{
    grad_drop(st);
}

void psim__conv_grad_dnnl_free(PsimConvGradDnnl *st)
{
    if (!st)
        return;
    grad_drop(st);
    g_free(st);
}

/* p's primitive from its descriptor and the forward hint; FALSE when oneDNN offers only its
 * reference code for it. q: the three arguments' descriptor queries (inputs, then output). */
static gboolean grad_make(GradPrim *p, const void *desc, const_dnnl_primitive_desc_t hint,
                          const dnnl_query_t q[3])
{
    dnnl_primitive_desc_t pd = fast_pd(desc, NULL, hint);
    gboolean ok = pd != NULL;
    if (ok) {
        for (int k = 0; k < 3; k++) {
            p->md[k] = *dnnl_primitive_desc_query_md(pd, q[k], 0);
            p->bytes[k] = dnnl_memory_desc_get_size(&p->md[k]);
        }
        p->pad_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        p->pad_bytes = dnnl_memory_desc_get_size(&p->pad_md);
        ok = DNNL_OK(dnnl_primitive_create(&p->prim, pd)) &&
             reorder(&p->plain[0], &p->md[0], &p->re[0]) &&
             reorder(&p->plain[1], &p->md[1], &p->re[1]) &&
             reorder(&p->md[2], &p->plain[2], &p->re[2]);
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return ok;
}

static gboolean grad_make_all(void *user)
{
    PsimConvGradDnnl *st = user;
    const ConvKey *k = &st->k.key;
    Descs d;
    dnnl_memory_desc_t src, w, dst;
    if (!descs(k, &d, &src, &dst, &w))
        return FALSE;
    dnnl_convolution_desc_t fd, bd, bw;
    dnnl_primitive_desc_t hint = NULL;
    gboolean ok =
        DNNL_OK(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                                           dnnl_convolution_direct, &d.src_any,
                                                           &d.w_any, NULL, &d.dst_any, d.strides,
                                                           d.dil, d.pl, d.pr)) &&
        DNNL_OK(dnnl_primitive_desc_create(&hint, &fd, NULL, engine(), NULL));
    /* dX from dY and W; dW from X and dY. */
    GradPrim *pd = &st->p[GRAD_DATA], *pw = &st->p[GRAD_WEIGHTS];
    pd->plain[0] = dst, pd->plain[1] = w, pd->plain[2] = src;
    pw->plain[0] = src, pw->plain[1] = dst, pw->plain[2] = w;
    static const dnnl_query_t qd[3] = {dnnl_query_diff_dst_md, dnnl_query_weights_md,
                                       dnnl_query_diff_src_md};
    static const dnnl_query_t qw[3] = {dnnl_query_src_md, dnnl_query_diff_dst_md,
                                       dnnl_query_diff_weights_md};
    ok = ok &&
         (!(k->post & 1) ||
          (DNNL_OK(dnnl_dilated_convolution_backward_data_desc_init(
               &bd, dnnl_convolution_direct, &d.src_any, &d.w_any, &d.dst_any, d.strides, d.dil,
               d.pl, d.pr)) &&
           grad_make(pd, &bd, hint, qd))) &&
         (!(k->post & 2) ||
          (DNNL_OK(dnnl_dilated_convolution_backward_weights_desc_init(
               &bw, dnnl_convolution_direct, &d.src_any, &d.w_any, NULL, &d.dst_any, d.strides,
               d.dil, d.pl, d.pr)) &&
           grad_make(pw, &bw, hint, qw)));
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    return ok;
}

/* Runs p on plain data (in0, in1 -> out) through its reorders, in thread scratch ws; an input
 * whose ready[k] is set is already in p's layout there (no reorder, no room in ws). */
static gboolean grad_exec(const GradPrim *p, dnnl_stream_t s, const int args[3], const void *in0,
                          const void *in1, void *out, void *const ready[2], char *ws)
{
    void *plain[3] = {(void *)in0, (void *)in1, out}, *data[3];
    gboolean ok = TRUE;
    for (int k = 0; k < 3; k++) {
        gboolean own = p->re[k] && !(k < 2 && ready[k]);
        data[k] = k < 2 && ready[k] ? ready[k] : own ? (void *)ws : plain[k];
        ws += own ? ALIGN64(p->bytes[k]) : 0;
    }
    for (int k = 0; k < 2 && ok; k++)
        if (p->re[k] && !ready[k])
            ok = run_reorder(p->re[k], s, &p->plain[k], plain[k], &p->md[k], data[k]);
    if (ok) {
        int a[4] = {args[0], args[1], args[2], DNNL_ARG_SCRATCHPAD};
        const dnnl_memory_desc_t *mds[4] = {&p->md[0], &p->md[1], &p->md[2], &p->pad_md};
        void *d[4] = {data[0], data[1], data[2], ws};
        ok = execute(p->prim, s, 4, a, mds, d);
    }
    if (ok && p->re[2])
        ok = run_reorder(p->re[2], s, &p->md[2], data[2], &p->plain[2], out);
    return ok;
}

static size_t grad_need(const GradPrim *p)
{
    size_t n = ALIGN64(p->pad_bytes);
    for (int k = 0; k < 3; k++)
        n += p->re[k] ? ALIGN64(p->bytes[k]) : 0;
    return p->prim ? n : 0;
}

int psim__conv_grad_dnnl_run(PsimConvGradDnnl *st, const PsimConvGradDnnlArgs *a, GError **error)
{
    PsimConvGradDnnl local = {0};
    if (!st)
        st = &local;
    /* key.post holds which gradients are made (1 dX, 2 dW). */
    ConvKey key = {a->N, a->C, a->H, a->W, a->M, a->kh, a->kw, a->sh, a->sw, a->dh, a->dw, a->ph,
                   a->pw, a->Ho, a->Wo, a->group, 0, (a->gx ? 1 : 0) | (a->gw ? 2 : 0), 0, 0};
    dnnl_stream_t s = stream();
    int taken = 0;
    if (!keyed(&st->k, &key, s, st, grad_drop_cb, grad_make_all))
        goto out;
    /* Both gradients read dY: reordered once when both primitives take it in one layout. */
    const GradPrim *pd = &st->p[GRAD_DATA], *pw = &st->p[GRAD_WEIGHTS];
    gboolean share = a->gx && a->gw && pd->re[0] && pw->re[1] &&
                     dnnl_memory_desc_equal(&pd->md[0], &pw->md[1]);
    size_t dy_bytes = share ? ALIGN64(pd->bytes[0]) : 0;
    size_t need = dy_bytes + MAX(grad_need(pd), grad_need(pw));
    char *ws = need ? psim__cpu_scratch(need, error) : NULL;
    if (need && !ws) {
        taken = -1;
        goto out;
    }
    static const int ad[3] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
    static const int aw[3] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS};
    void *dyb = share ? ws : NULL, *none[2] = {NULL, NULL};
    void *const rd[2] = {dyb, NULL}, *const rw[2] = {NULL, dyb};
    gboolean ok = !share || run_reorder(pd->re[0], s, &pd->plain[0], a->dy, &pd->md[0], dyb);
    ok = ok && (!a->gx || grad_exec(pd, s, ad, a->dy, a->w, a->gx, share ? rd : none, ws + dy_bytes)) &&
         (!a->gw || grad_exec(pw, s, aw, a->x, a->dy, a->gw, share ? rw : none, ws + dy_bytes));
    if (!ok) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "oneDNN failed to run the convolution's gradients");
        taken = -1;
        goto out;
    }
    taken = 1;
out:
    if (st == &local)
        grad_drop(st);
    return taken;
}
