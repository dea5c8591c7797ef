/* Activations as one pass over float32 data: the standalone Relu, LeakyRelu, HardSigmoid, Clip,
 * Sigmoid and Tanh kernels and the epilogue of a fused convolution (FusedConv) run the same loops,
 * so a fused node computes exactly what the two nodes it replaces computed. Also the gated
 * activations the fusion pass makes of several nodes: QuickGelu (x sigmoid(alpha x)) and Gelu
 * (x (1 + erf(x / sqrt 2)) / 2), in one pass of the vectorised math (kernels/cpu/vmath.c). */
#include "cpu-private.h"

#include <math.h>
#include <string.h>

gboolean psim__act_from_name(const char *name, const float *params, int32_t n_params, PsimAct *out)
{
    static const struct {
        const char *name;
        PsimActKind kind;
        int32_t n_params;
        float a, b; /* defaults (ONNX's) */
    } acts[] = {
        {"Relu", PSIM_ACT_RELU, 0, 0, 0},
        {"Sigmoid", PSIM_ACT_SIGMOID, 0, 0, 0},
        {"Tanh", PSIM_ACT_TANH, 0, 0, 0},
        {"LeakyRelu", PSIM_ACT_LEAKY_RELU, 1, 0.01f, 0},
        {"Clip", PSIM_ACT_CLIP, 2, -INFINITY, INFINITY},
        {"HardSigmoid", PSIM_ACT_HARD_SIGMOID, 2, 0.2f, 0.5f},
    };
    for (size_t i = 0; i < G_N_ELEMENTS(acts); i++) {
        if (strcmp(name, acts[i].name))
            continue;
        if (n_params != 0 && n_params != acts[i].n_params)
            return FALSE;
        *out = (PsimAct){acts[i].kind, n_params > 0 ? params[0] : acts[i].a,
                         n_params > 1 ? params[1] : acts[i].b};
        return TRUE;
    }
    return FALSE;
}

/* No branch on the data (a ternary with a multiply on one side stays a branch per element:
 * LeakyRelu took 4.2x as long on N(0,1) as on a ramp): max and min as the compares GCC turns
 * into maxps and minps. NaN: Relu gives 0, LeakyRelu and Clip keep it, HardSigmoid gives 1 (as
 * fmaxf(0, fminf(1, NaN)) does). y may be x. */
PSIM_CPU_CLONES void psim__act_f32(const PsimAct *act, const float *x, float *y, int64_t n)
{
    switch (act->kind) {
    case PSIM_ACT_NONE:
        if (x != y)
            memmove(y, x, sizeof(float) * (size_t)n);
        return;
    case PSIM_ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return;
    case PSIM_ACT_LEAKY_RELU: {
        float al = act->a;
        for (int64_t i = 0; i < n; i++) {
            float v = x[i], pos = v > 0.0f ? v : 0.0f, neg = 0.0f < v ? 0.0f : v;
            y[i] = pos + al * neg;
        }
        return;
    }
    case PSIM_ACT_CLIP: {
        float lo = act->a, hi = act->b;
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] < lo ? lo : x[i];
            y[i] = v > hi ? hi : v;
        }
        return;
    }
    case PSIM_ACT_HARD_SIGMOID: {
        float al = act->a, be = act->b;
        for (int64_t i = 0; i < n; i++) {
            float v = al * x[i] + be;
            v = v < 1.0f ? v : 1.0f;
            y[i] = v > 0.0f ? v : 0.0f;
        }
        return;
    }
    case PSIM_ACT_SIGMOID: psim__vmath_f32(PSIM_VMATH_SIGMOID, x, y, n); return;
    case PSIM_ACT_TANH: psim__vmath_f32(PSIM_VMATH_TANH, x, y, n); return;
    }
}

void psim__act_f64(const PsimAct *act, const double *x, double *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        switch (act->kind) {
        case PSIM_ACT_NONE: break;
        case PSIM_ACT_RELU: v = v > 0.0 ? v : 0.0; break;
        case PSIM_ACT_LEAKY_RELU: v = v > 0.0 ? v : act->a * v; break;
        case PSIM_ACT_CLIP: v = v < act->a ? act->a : (v > act->b ? act->b : v); break;
        case PSIM_ACT_HARD_SIGMOID: v = fmax(0.0, fmin(1.0, act->a * v + act->b)); break;
        case PSIM_ACT_SIGMOID: v = v >= 0 ? 1.0 / (1.0 + exp(-v)) : exp(v) / (1.0 + exp(v)); break;
        case PSIM_ACT_TANH: v = tanh(v); break;
        }
        y[i] = v;
    }
}

/* Elements per block of QuickGelu with alpha other than 1: 16 KiB of input, as much of output. */
#define GATE_BLOCK 4096

/* y = x sigmoid(alpha x): in one pass (SiLU) for alpha 1, else block by block (alpha x into a
 * block, sigmoid in place, times x), the values the nodes it replaces computed either way. */
void psim__act_quick_gelu_f32(float alpha, const float *x, float *y, int64_t n)
{
    if (alpha == 1.0f) {
        psim__vmath_f32(PSIM_VMATH_SILU, x, y, n);
        return;
    }
    for (int64_t i0 = 0; i0 < n; i0 += GATE_BLOCK) {
        int64_t m = MIN(GATE_BLOCK, n - i0);
        const float *a = x + i0; /* y may be x */
        float *b = y + i0;
        float t[GATE_BLOCK];
        for (int64_t i = 0; i < m; i++)
            t[i] = alpha * a[i];
        psim__vmath_f32(PSIM_VMATH_SIGMOID, t, t, m);
        for (int64_t i = 0; i < m; i++)
            b[i] = a[i] * t[i];
    }
}

/* y = x (1 + erf(x / sqrt 2)) / 2 in one pass, as the five nodes it replaces compute it (x / sqrt
 * 2 rounded to float, erf, + 1, times x, times 1/2). */
void psim__act_gelu_f32(const float *x, float *y, int64_t n)
{
    psim__vmath_f32(PSIM_VMATH_GELU, x, y, n);
}
