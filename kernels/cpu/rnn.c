/* ONNX's recurrent layers, RNN, GRU and LSTM (float32, float64; computed in double): forward,
 * reverse or bidirectional, layout 0 or 1, biases, initial states, sequence_lens (a batch entry's
 * steps past its length output zeros and keep its state), LSTM peepholes and input_forget, GRU
 * linear_before_reset, clip, and the activations Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu,
 * Affine, ThresholdedRelu, ScaledTanh, Elu, Softsign, Softplus with their alpha/beta. Gate
 * order as ONNX: LSTM i, o, f, c; GRU z, r, h. */
#include "cpu-private.h"

#include <math.h>

typedef struct {
    char name[24];
    double alpha, beta;
} Act;

static double act(const Act *a, double x)
{
    const char *s = a->name;
    if (!strcmp(s, "Tanh"))
        return tanh(x);
    if (!strcmp(s, "Sigmoid"))
        return 1 / (1 + exp(-x));
    if (!strcmp(s, "Relu"))
        return x > 0 ? x : 0;
    if (!strcmp(s, "HardSigmoid"))
        return fmax(0, fmin(1, a->alpha * x + a->beta));
    if (!strcmp(s, "LeakyRelu"))
        return x >= 0 ? x : a->alpha * x;
    if (!strcmp(s, "Affine"))
        return a->alpha * x + a->beta;
    if (!strcmp(s, "ThresholdedRelu"))
        return x > a->alpha ? x : 0;
    if (!strcmp(s, "ScaledTanh"))
        return a->alpha * tanh(a->beta * x);
    if (!strcmp(s, "Elu"))
        return x >= 0 ? x : a->alpha * (exp(x) - 1);
    if (!strcmp(s, "Softsign"))
        return x / (1 + fabs(x));
    return log1p(exp(x)); /* Softplus */
}

/* The canonical spelling of an activation name (any case), or NULL. */
static const char *act_canonical(const char *s)
{
    static const char *const known[] = {"Tanh", "Sigmoid", "Relu", "HardSigmoid", "LeakyRelu", "Affine",
                                        "ThresholdedRelu", "ScaledTanh", "Elu", "Softsign", "Softplus"};
    for (size_t i = 0; i < G_N_ELEMENTS(known); i++)
        if (!g_ascii_strcasecmp(s, known[i]))
            return known[i];
    return NULL;
}


static gboolean run_rnn(PsimKernelCtx *ctx, GError **error)
{
    if (!psim__cpu_need(ctx, 3, error))
        return FALSE;
    const PsimNode *node = ctx->node;
    const char *op = node->op;
    gboolean lstm = !strcmp(op, "LSTM"), gru = !strcmp(op, "GRU");
    int32_t G = lstm ? 4 : gru ? 3 : 1, n_act = lstm ? 3 : gru ? 2 : 1;
    PsimTensor *X = ctx->inputs[0], *W = ctx->inputs[1], *R = ctx->inputs[2];
    PsimTensor *Bt = psim__cpu_in(ctx, 3), *lens = psim__cpu_in(ctx, 4), *h0 = psim__cpu_in(ctx, 5);
    PsimTensor *c0 = lstm ? psim__cpu_in(ctx, 6) : NULL, *P = lstm ? psim__cpu_in(ctx, 7) : NULL;
    gboolean bf = psim_node_attr_int(node, "layout", 0) != 0;
    const char *dir = psim_node_attr_string(node, "direction", "forward");
    int64_t D = !strcmp(dir, "bidirectional") ? 2 : 1;
    if ((X->dtype != PSIM_DTYPE_FLOAT32 && X->dtype != PSIM_DTYPE_FLOAT64) || X->rank != 3 ||
        W->rank != 3 || R->rank != 3 || W->dims[0] != D || R->dims[0] != D) {
        KERR(ctx, error, "%s needs X (3-D float), W and R with %" G_GINT64_FORMAT " direction(s)", op, D);
        return FALSE;
    }
    int64_t S = X->dims[bf ? 1 : 0], Bn = X->dims[bf ? 0 : 1], I = X->dims[2];
    int64_t H = psim_node_attr_int(node, "hidden_size", R->dims[2]);
    if (H != R->dims[2] || W->dims[1] != G * H || W->dims[2] != I || R->dims[1] != G * H ||
        (Bt && Bt->n_elems != D * 2 * G * H) || (h0 && h0->n_elems != D * Bn * H) ||
        (c0 && c0->n_elems != D * Bn * H) || (P && P->n_elems != D * 3 * H) ||
        (lens && lens->n_elems != Bn)) {
        KERR(ctx, error, "%s: the weights, biases, states or lengths do not fit hidden_size %" G_GINT64_FORMAT,
             op, H);
        return FALSE;
    }
    /* Activations: per direction, n_act names (defaults per op). */
    Act acts[2][3];
    const PsimAttr *an = psim_node_attr(node, "activations");
    const PsimAttr *aa = psim_node_attr(node, "activation_alpha"), *ab = psim_node_attr(node, "activation_beta");
    for (int64_t d = 0; d < D; d++)
        for (int32_t k = 0; k < n_act; k++) {
            int32_t at = (int32_t)d * n_act + k;
            const char *name = lstm ? (k == 0 ? "Sigmoid" : "Tanh") : gru ? (k == 0 ? "Sigmoid" : "Tanh") : "Tanh";
            if (an && an->type == PSIM_ATTR_STRINGS && at < an->n)
                name = an->v.strs[at];
            const char *canon = act_canonical(name);
            if (!canon) {
                KERR(ctx, error, "%s: activation '%s' is not supported", op, name);
                return FALSE;
            }
            Act *a = &acts[d][k];
            g_strlcpy(a->name, canon, sizeof a->name);
            a->alpha = aa && aa->type == PSIM_ATTR_FLOATS && at < aa->n ? aa->v.floats[at]
                       : !strcmp(a->name, "LeakyRelu")                 ? 0.01
                       : !strcmp(a->name, "HardSigmoid")               ? 0.2
                                                                      : 1.0;
            a->beta = ab && ab->type == PSIM_ATTR_FLOATS && at < ab->n ? ab->v.floats[at]
                      : !strcmp(a->name, "HardSigmoid")                ? 0.5
                                                                      : 0.0;
        }
    double clip = psim_node_attr_float(node, "clip", 0);
    gboolean lbr = psim_node_attr_int(node, "linear_before_reset", 0) != 0;
    gboolean input_forget = psim_node_attr_int(node, "input_forget", 0) != 0;
    int64_t yd[4] = {S, D, Bn, H}, ydb[4] = {Bn, S, D, H}, hd[3] = {D, Bn, H}, hdb[3] = {Bn, D, H};
    PsimTensor *Y = psim__cpu_wants(ctx, 0) ? psim__cpu_out(ctx, 0, X->dtype, 4, bf ? ydb : yd, error) : NULL;
    PsimTensor *Yh = psim__cpu_wants(ctx, 1) ? psim__cpu_out(ctx, 1, X->dtype, 3, bf ? hdb : hd, error) : NULL;
    PsimTensor *Yc = lstm && psim__cpu_wants(ctx, 2) ? psim__cpu_out(ctx, 2, X->dtype, 3, bf ? hdb : hd, error) : NULL;
    if ((psim__cpu_wants(ctx, 0) && !Y) || (psim__cpu_wants(ctx, 1) && !Yh) ||
        (lstm && psim__cpu_wants(ctx, 2) && !Yc))
        return FALSE;
    if (Y)
        memset(Y->data, 0, Y->nbytes);
    g_autofree double *h = g_new(double, Bn * H + 1), *c = g_new(double, Bn * H + 1),
                      *gates = g_new(double, G * H + 1), *hn = g_new(double, H + 1),
                      *rvec = g_new(double, H + 1);
    for (int64_t d = 0; d < D; d++) {
        gboolean rev = !strcmp(dir, "reverse") || d == 1;
        for (int64_t i = 0; i < Bn * H; i++) {
            h[i] = h0 ? psim_tensor_get_f64(h0, (bf ? (i / H) * D * H + d * H + i % H : d * Bn * H + i)) : 0;
            c[i] = c0 ? psim_tensor_get_f64(c0, (bf ? (i / H) * D * H + d * H + i % H : d * Bn * H + i)) : 0;
        }
        for (int64_t b = 0; b < Bn; b++) {
            int64_t len = S;
            if (lens && lens->dtype == PSIM_DTYPE_INT32)
                len = CLAMP(((const int32_t *)lens->data)[b], 0, S);
            else if (lens && lens->dtype == PSIM_DTYPE_INT64)
                len = CLAMP(((const int64_t *)lens->data)[b], 0, S);
            double *hb = h + b * H, *cb = c + b * H;
            for (int64_t step = 0; step < len; step++) {
                int64_t t = rev ? len - 1 - step : step;
                const int64_t xo = bf ? (b * S + t) * I : (t * Bn + b) * I;
                /* gates = X W^T + Wb (+ H R^T + Rb, except GRU's h gate) */
                for (int64_t gi = 0; gi < G * H; gi++) {
                    double s = Bt ? psim_tensor_get_f64(Bt, d * 2 * G * H + gi) : 0;
                    for (int64_t k = 0; k < I; k++)
                        s += psim_tensor_get_f64(X, xo + k) * psim_tensor_get_f64(W, (d * G * H + gi) * I + k);
                    gboolean h_gate = gru && gi >= 2 * H;
                    if (!h_gate) {
                        s += Bt ? psim_tensor_get_f64(Bt, d * 2 * G * H + G * H + gi) : 0;
                        for (int64_t k = 0; k < H; k++)
                            s += hb[k] * psim_tensor_get_f64(R, (d * G * H + gi) * H + k);
                    }
                    gates[gi] = s;
                }
                if (gru) /* the reset gate of every unit, for the h gate's (r (.) H) Rh^T */
                    for (int64_t k = 0; k < H; k++)
                        rvec[k] = act(&acts[d][0], clip > 0 ? CLAMP(gates[H + k], -clip, clip) : gates[H + k]);
                for (int64_t j = 0; j < H; j++) {
                    if (lstm) {
                        double pi = P ? psim_tensor_get_f64(P, d * 3 * H + j) : 0, po = P ? psim_tensor_get_f64(P, d * 3 * H + H + j) : 0,
                               pf = P ? psim_tensor_get_f64(P, d * 3 * H + 2 * H + j) : 0;
                        double gi_ = gates[j] + pi * cb[j], go = gates[H + j], gf = gates[2 * H + j] + pf * cb[j],
                               gc = gates[3 * H + j];
                        if (clip > 0) {
                            gi_ = CLAMP(gi_, -clip, clip);
                            gf = CLAMP(gf, -clip, clip);
                            gc = CLAMP(gc, -clip, clip);
                        }
                        double it = act(&acts[d][0], gi_), ft = input_forget ? 1 - it : act(&acts[d][0], gf);
                        double ct = act(&acts[d][1], gc);
                        double cn = ft * cb[j] + it * ct;
                        go += po * cn;
                        if (clip > 0)
                            go = CLAMP(go, -clip, clip);
                        hn[j] = act(&acts[d][0], go) * act(&acts[d][2], cn);
                        cb[j] = cn;
                    } else if (gru) {
                        double z = gates[j], r = gates[H + j];
                        if (clip > 0) {
                            z = CLAMP(z, -clip, clip);
                            r = CLAMP(r, -clip, clip);
                        }
                        z = act(&acts[d][0], z);
                        r = act(&acts[d][0], r);
                        /* h gate: X Wh^T + Wbh (in gates) plus r (.) (H Rh^T + Rbh) with
                         * linear_before_reset, else (r (.) H) Rh^T + Rbh. */
                        double rb = Bt ? psim_tensor_get_f64(Bt, d * 2 * G * H + G * H + 2 * H + j) : 0;
                        double rh;
                        if (lbr) {
                            double s = rb;
                            for (int64_t k = 0; k < H; k++)
                                s += hb[k] * psim_tensor_get_f64(R, (d * G * H + 2 * H + j) * H + k);
                            rh = r * s;
                        } else {
                            double s = rb;
                            for (int64_t k = 0; k < H; k++)
                                s += rvec[k] * hb[k] * psim_tensor_get_f64(R, (d * G * H + 2 * H + j) * H + k);
                            rh = s;
                        }
                        double hv = gates[2 * H + j] + rh;
                        if (clip > 0)
                            hv = CLAMP(hv, -clip, clip);
                        hv = act(&acts[d][1], hv);
                        hn[j] = (1 - z) * hv + z * hb[j];
                    } else {
                        double v = gates[j];
                        if (clip > 0)
                            v = CLAMP(v, -clip, clip);
                        hn[j] = act(&acts[d][0], v);
                    }
                }
                memcpy(hb, hn, sizeof(double) * (size_t)H);
                if (Y)
                    for (int64_t j = 0; j < H; j++)
                        psim_tensor_set_f64(Y, bf ? ((b * S + t) * D + d) * H + j : ((t * D + d) * Bn + b) * H + j, hb[j]);
            }
        }
        for (int64_t i = 0; i < Bn * H; i++) {
            int64_t at = bf ? (i / H) * D * H + d * H + i % H : d * Bn * H + i;
            if (Yh)
                psim_tensor_set_f64(Yh, at, h[i]);
            if (Yc)
                psim_tensor_set_f64(Yc, at, c[i]);
        }
    }
    return TRUE;
}

void psim__cpu_register_rnn(void)
{
    static const PsimDType types[] = {PSIM_DTYPE_FLOAT32, PSIM_DTYPE_FLOAT64, -1};
    psim__cpu_add("RNN", "cpu-rnn", "Elman recurrent layer", run_rnn, types, NULL);
    psim__cpu_add("GRU", "cpu-rnn", "gated recurrent unit layer", run_rnn, types, NULL);
    psim__cpu_add("LSTM", "cpu-rnn", "long short-term memory layer", run_rnn, types, NULL);
}
