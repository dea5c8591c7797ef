/* Generated tensor data: normal N(0, 1) from a seed (splitmix64 and Box-Muller), uniform
 * [0, 1) from a seed, zeros, ones, or the arange(n)/n ramp. The feeds of `run`, `profile` and `study`, and the profiler's inputs,
 * come from here, so that a profile times kernels on the distribution the run it predicts sees. */
#include <math.h>
#include <string.h>

#include "graph-private.h"

static const char *const names[] = {"random", "zeros", "ones", "ramp", "uniform"};

const char *psim_tensor_fill_name(PsimTensorFill fill)
{
    return (unsigned)fill < G_N_ELEMENTS(names) ? names[fill] : "?";
}

gboolean psim_tensor_fill_from_name(const char *name, PsimTensorFill *out)
{
    for (size_t i = 0; name && i < G_N_ELEMENTS(names); i++)
        if (!strcmp(name, names[i])) {
            *out = (PsimTensorFill)i;
            return TRUE;
        }
    return FALSE;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

uint64_t psim_tensor_fill_seed(uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a: stable across builds, unlike a pointer hash */
    for (const unsigned char *c = (const unsigned char *)(name ? name : ""); *c; c++)
        h = (h ^ *c) * 1099511628211u;
    uint64_t s = seed ^ h;
    return splitmix(&s);
}

/* Element i of a fill as a double; pairs of normals come from one Box-Muller draw. */
static void fill_values(PsimTensorFill fill, uint64_t seed, int64_t n, void *data, gboolean f64)
{
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i += 2) {
        double v[2];
        switch (fill) {
        case PSIM_TENSOR_FILL_RANDOM: {
            /* u1 in (0, 1], u2 in [0, 1): 53 random bits each. */
            double u1 = ((double)(splitmix(&s) >> 11) + 1.0) / 9007199254740992.0;
            double u2 = (double)(splitmix(&s) >> 11) / 9007199254740992.0;
            double r = sqrt(-2.0 * log(u1));
            v[0] = r * cos(2 * G_PI * u2);
            v[1] = r * sin(2 * G_PI * u2);
            break;
        }
        case PSIM_TENSOR_FILL_UNIFORM: /* 53 random bits each, in [0, 1) */
            v[0] = (double)(splitmix(&s) >> 11) / 9007199254740992.0;
            v[1] = (double)(splitmix(&s) >> 11) / 9007199254740992.0;
            break;
        case PSIM_TENSOR_FILL_ZEROS: v[0] = v[1] = 0; break;
        case PSIM_TENSOR_FILL_ONES: v[0] = v[1] = 1; break;
        default: /* RAMP */
            v[0] = (double)i / (double)n;
            v[1] = (double)(i + 1) / (double)n;
            break;
        }
        for (int k = 0; k < 2 && i + k < n; k++) {
            if (f64)
                ((double *)data)[i + k] = v[k];
            else /* float32 rounds 1 - 2^-53 up to 1: uniform stays below it */
                ((float *)data)[i + k] = fill == PSIM_TENSOR_FILL_UNIFORM && v[k] >= 1.0 - 0x1p-25
                                             ? 1.0f - 0x1p-24f
                                             : (float)v[k];
        }
    }
}

void psim_tensor_fill(PsimTensor *t, PsimTensorFill fill, uint64_t seed)
{
    g_return_if_fail(t != NULL);
    if (t->dtype == PSIM_DTYPE_FLOAT32 || t->dtype == PSIM_DTYPE_FLOAT64)
        fill_values(fill, seed, t->n_elems, t->data, t->dtype == PSIM_DTYPE_FLOAT64);
    else if (t->dtype != PSIM_DTYPE_STRING && fill == PSIM_TENSOR_FILL_ONES)
        for (int64_t i = 0; i < t->n_elems; i++)
            psim_tensor_set_f64(t, i, 1);
    else if (t->dtype != PSIM_DTYPE_STRING)
        memset(t->data, 0, t->nbytes);
}
