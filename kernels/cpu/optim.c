/* Optimizers as graph ops, ONNX's ai.onnx.preview.training set: Momentum (standard and
 * Nesterov), Adam and Adagrad. Each takes the learning rate R and the update count T (int64
 * scalars of the step), then the tensors X, their gradients G and their optimizer state, and
 * returns new tensors: the training graph assigns them to the variables. float32 in float
 * arithmetic (vectorised loops), float64 in double. */
#include <math.h>

#include "cpu-private.h"

typedef enum { OPT_MOMENTUM, OPT_NESTEROV, OPT_ADAM, OPT_ADAGRAD } OptKind;

typedef struct {
    OptKind kind;
    double r, alpha, beta, eps, norm, norm_post, decay;
    double r_step; /* the step's learning rate: Adam's bias-corrected, Adagrad's decayed */
    int64_t t;
} Opt;

/* One tensor's update; v and h may be NULL where the method has no such state. */
static void update(const Opt *o, int64_t n, const double *x, const double *g, const double *v,
                   const double *h, double *xo, double *vo, double *ho)
{
    for (int64_t i = 0; i < n; i++) {
        double xi = x[i];
        double gr = o->norm * xi + g[i];
        switch (o->kind) {
        case OPT_MOMENTUM:
        case OPT_NESTEROV: {
            double beta = o->t > 0 ? o->beta : 1.0;
            double vn = o->alpha * v[i] + beta * gr;
            double xn = o->kind == OPT_MOMENTUM ? xi - o->r * vn : xi - o->r * (gr + o->alpha * vn);
            vo[i] = vn;
            xo[i] = xn;
            break;
        }
        case OPT_ADAM: {
            double vn = o->alpha * v[i] + (1 - o->alpha) * gr;
            double hn = o->beta * h[i] + (1 - o->beta) * gr * gr;
            double xn = xi - o->r_step * (vn / (sqrt(hn) + o->eps));
            vo[i] = vn;
            ho[i] = hn;
            xo[i] = (1 - o->norm_post) * xn;
            break;
        }
        case OPT_ADAGRAD: {
            double hn = h[i] + gr * gr;
            ho[i] = hn;
            xo[i] = xi - o->r_step * gr / (sqrt(hn) + o->eps);
            break;
        }
        }
    }
}

/* The same for float32 in float arithmetic, one loop per method without a branch inside, so
 * that the compiler vectorises it (the optimizer touches every parameter at every step). */
static void update_f32(const Opt *o, int64_t n, const float *restrict x, const float *restrict g,
                       const float *restrict v, const float *restrict h, float *restrict xo,
                       float *restrict vo, float *restrict ho)
{
    const float norm = (float)o->norm, alpha = (float)o->alpha, r = (float)o->r_step;
    const float eps = (float)o->eps;
    switch (o->kind) {
    case OPT_MOMENTUM:
    case OPT_NESTEROV: {
        const float beta = o->t > 0 ? (float)o->beta : 1.0f;
        const float nest = o->kind == OPT_NESTEROV ? 1.0f : 0.0f;
        for (int64_t i = 0; i < n; i++) {
            float gr = norm * x[i] + g[i];
            float vn = alpha * v[i] + beta * gr;
            vo[i] = vn;
            xo[i] = x[i] - r * (nest * (gr + alpha * vn) + (1.0f - nest) * vn);
        }
        break;
    }
    case OPT_ADAM: {
        const float beta = (float)o->beta, post = 1.0f - (float)o->norm_post;
        for (int64_t i = 0; i < n; i++) {
            float gr = norm * x[i] + g[i];
            float vn = alpha * v[i] + (1.0f - alpha) * gr;
            float hn = beta * h[i] + (1.0f - beta) * gr * gr;
            vo[i] = vn;
            ho[i] = hn;
            xo[i] = post * (x[i] - r * (vn / (sqrtf(hn) + eps)));
        }
        break;
    }
    case OPT_ADAGRAD:
        for (int64_t i = 0; i < n; i++) {
            float gr = norm * x[i] + g[i];
            float hn = h[i] + gr * gr;
            ho[i] = hn;
            xo[i] = x[i] - r * gr / (sqrtf(hn) + eps);
        }
        break;
    }
}

static gboolean run_optimizer(PsimKernelCtx *ctx, GError **error)
{
    const PsimNode *nd = ctx->node;
    Opt o = {0};
    int32_t groups; /* X, G and the state tensors per optimized tensor */
    if (!strcmp(nd->op, "Momentum")) {
        const char *mode = psim_node_attr_string(nd, "mode", "standard");
        if (strcmp(mode, "standard") && strcmp(mode, "nesterov")) {
            KERR(ctx, error, "mode '%s' is neither standard nor nesterov", mode);
            return FALSE;
        }
        o.kind = !strcmp(mode, "standard") ? OPT_MOMENTUM : OPT_NESTEROV;
        o.alpha = psim_node_attr_float(nd, "alpha", 0.9);
        o.beta = psim_node_attr_float(nd, "beta", 1.0);
        groups = 3;
    } else if (!strcmp(nd->op, "Adam")) {
        o.kind = OPT_ADAM;
        o.alpha = psim_node_attr_float(nd, "alpha", 0.9);
        o.beta = psim_node_attr_float(nd, "beta", 0.999);
        o.eps = psim_node_attr_float(nd, "epsilon", 1e-6);
        o.norm_post = psim_node_attr_float(nd, "norm_coefficient_post", 0.0);
        groups = 4;
    } else {
        o.kind = OPT_ADAGRAD;
        o.eps = psim_node_attr_float(nd, "epsilon", 1e-6);
        o.decay = psim_node_attr_float(nd, "decay_factor", 0.0);
        groups = 3;
    }
    o.norm = psim_node_attr_float(nd, "norm_coefficient", 0.0);
    PsimTensor *r = psim__cpu_in(ctx, 0), *t = psim__cpu_in(ctx, 1);
    int32_t n = (ctx->n_inputs - 2) / groups;
    if (!r || !t || r->n_elems != 1 || t->n_elems != 1 || n < 1 ||
        ctx->n_inputs != 2 + groups * n || ctx->n_outputs > (groups - 1) * n ||
        (r->dtype != PSIM_DTYPE_FLOAT32 && r->dtype != PSIM_DTYPE_FLOAT64) ||
        t->dtype != PSIM_DTYPE_INT64) {
        KERR(ctx, error, "needs a float scalar R, an int64 scalar T and %d tensors per optimized "
                         "tensor",
             groups);
        return FALSE;
    }
    o.r = psim_tensor_get_f64(r, 0);
    o.t = psim_tensor_get_i64(t, 0);
    o.r_step = o.r;
    if (o.kind == OPT_ADAM && o.t > 0)
        o.r_step = o.r * sqrt(1 - pow(o.beta, (double)o.t)) / (1 - pow(o.alpha, (double)o.t));
    else if (o.kind == OPT_ADAGRAD)
        o.r_step = o.r / (1 + (double)o.t * o.decay);
    for (int32_t k = 0; k < n; k++) {
        PsimTensor *x = psim__cpu_in(ctx, 2 + k), *g = psim__cpu_in(ctx, 2 + n + k),
                   *s1 = psim__cpu_in(ctx, 2 + 2 * n + k),
                   *s2 = groups == 4 ? psim__cpu_in(ctx, 2 + 3 * n + k) : NULL;
        if (!x || (x->dtype != PSIM_DTYPE_FLOAT32 && x->dtype != PSIM_DTYPE_FLOAT64) ||
            !psim__cpu_same_shape(x, g) || !psim__cpu_same_shape(x, s1) || (groups == 4 && !psim__cpu_same_shape(x, s2))) {
            KERR(ctx, error, "tensor %d: X, its gradient and its state must be float tensors of "
                             "one dtype and shape",
                 k);
            return FALSE;
        }
        PsimTensor *xo = psim__cpu_out(ctx, k, x->dtype, x->rank, x->dims, error);
        PsimTensor *so = xo && ctx->n_outputs > n + k
                             ? psim__cpu_out(ctx, n + k, x->dtype, x->rank, x->dims, error)
                             : NULL;
        PsimTensor *so2 = xo && groups == 4 && ctx->n_outputs > 2 * n + k
                              ? psim__cpu_out(ctx, 2 * n + k, x->dtype, x->rank, x->dims, error)
                              : NULL;
        if (!xo || (ctx->n_outputs > n + k && !so) ||
            (groups == 4 && ctx->n_outputs > 2 * n + k && !so2))
            return FALSE;
        /* State outputs not asked for are computed into scratch and dropped. */
        void *scratch = NULL;
        if (!so || (groups == 4 && !so2)) {
            scratch = psim__cpu_scratch(x->nbytes, error);
            if (!scratch)
                return FALSE;
        }
        /* The state each method reads and writes (scratch for outputs not asked for). */
        gboolean adagrad = o.kind == OPT_ADAGRAD, adam = o.kind == OPT_ADAM;
        void *v_in = adagrad ? NULL : s1->data, *h_in = adagrad ? s1->data : adam ? s2->data : NULL;
        void *v_out = adagrad ? NULL : so ? so->data : scratch;
        void *h_out = adagrad ? (so ? so->data : scratch) : adam ? (so2 ? so2->data : scratch) : NULL;
        if (x->dtype == PSIM_DTYPE_FLOAT32)
            update_f32(&o, x->n_elems, x->data, g->data, v_in, h_in, xo->data, v_out, h_out);
        else
            update(&o, x->n_elems, x->data, g->data, v_in, h_in, xo->data, v_out, h_out);
    }
    return TRUE;
}

void psim__cpu_register_optim(void)
{
    static const PsimDType types[] = {PSIM_DTYPE_FLOAT32, PSIM_DTYPE_FLOAT64, (PsimDType)-1};
    psim__cpu_add("Momentum", "cpu-momentum", "SGD with momentum (standard or Nesterov)",
                  run_optimizer, types, NULL);
    psim__cpu_add("Adam", "cpu-adam", "Adam", run_optimizer, types, NULL);
    psim__cpu_add("Adagrad", "cpu-adagrad", "Adagrad", run_optimizer, types, NULL);
}
