/* Own CUDA kernels: n-ary elementwise with numpy broadcasting (strides of 0 on broadcast dims),
 * Cast, the index-map gather behind the data-movement ops, ReduceMean/ReduceSum,
 * LayerNormalization and an inference BatchNormalization for epsilons below cuDNN's minimum. */
#include "cuda-private.h"

#include <cuda_runtime.h>
#include <math.h>

#define BLOCK 256

static inline unsigned grid_for(int64_t n)
{
    int64_t g = (n + BLOCK - 1) / BLOCK;
    return (unsigned)(g > 65535 * 32 ? 65535 * 32 : (g < 1 ? 1 : g));
}

__device__ static inline void offsets(const PsimCudaBcast &b, int64_t i, int n_in, int64_t *off)
{
    off[0] = off[1] = off[2] = 0;
    for (int d = b.rank - 1; d >= 0; d--) {
        int64_t q = i % b.dims[d];
        i /= b.dims[d];
        for (int k = 0; k < n_in; k++)
            off[k] += q * b.strides[k][d];
    }
}

template <typename T> __device__ static inline T binop(int op, T x, T y)
{
    switch (op) {
    case PSIM_CE_ADD: return x + y;
    case PSIM_CE_SUB: return x - y;
    case PSIM_CE_MUL: return x * y;
    case PSIM_CE_DIV: return y == T(0) ? T(0) : x / y; /* integers: ONNX leaves /0 undefined */
    case PSIM_CE_MAX: return x > y ? x : y;
    case PSIM_CE_MIN: return x < y ? x : y;
    default: return T(0);
    }
}
template <> __device__ inline float binop<float>(int op, float x, float y)
{
    switch (op) {
    case PSIM_CE_ADD: return x + y;
    case PSIM_CE_SUB: return x - y;
    case PSIM_CE_MUL: return x * y;
    case PSIM_CE_DIV: return x / y;
    case PSIM_CE_POW: return powf(x, y);
    case PSIM_CE_MAX: return (isnan(x) || x > y) ? x : y;
    case PSIM_CE_MIN: return (isnan(x) || x < y) ? x : y;
    default: return 0.0f;
    }
}

__device__ static inline float unop(int op, float x, float p0, float p1)
{
    switch (op) {
    case PSIM_CE_SQRT: return sqrtf(x);
    case PSIM_CE_NEG: return -x;
    case PSIM_CE_EXP: return expf(x);
    case PSIM_CE_LOG: return logf(x);
    case PSIM_CE_RELU: return x > 0.0f ? x : 0.0f;
    case PSIM_CE_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case PSIM_CE_TANH: return tanhf(x);
    case PSIM_CE_ERF: return erff(x);
    case PSIM_CE_ABS: return fabsf(x);
    case PSIM_CE_CLIP: return x < p0 ? p0 : (x > p1 ? p1 : x);
    default: return x;
    }
}

template <typename T>
__global__ void k_binary(int op, int64_t n, PsimCudaBcast b, const T *x, const T *y, T *out)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        offsets(b, i, 2, off);
        out[i] = binop<T>(op, x[off[0]], y[off[1]]);
    }
}

template <typename T>
__global__ void k_compare(int op, int64_t n, PsimCudaBcast b, const T *x, const T *y, bool *out)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        offsets(b, i, 2, off);
        T u = x[off[0]], v = y[off[1]];
        out[i] = op == PSIM_CE_EQUAL ? u == v : op == PSIM_CE_LESS ? u < v : u > v;
    }
}

template <typename T>
__global__ void k_where(int64_t n, PsimCudaBcast b, const bool *c, const T *x, const T *y, T *out)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        offsets(b, i, 3, off);
        out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
    }
}

__global__ void k_unary(int op, int64_t n, const float *x, float *out, float p0, float p1)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = unop(op, x[i], p0, p1);
}

template <typename T> __global__ void k_neg(int64_t n, const T *x, T *out)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = -x[i];
}

template <typename T>
static int binary_t(cudaStream_t s, int op, int64_t n, const PsimCudaBcast *b, const void *x,
                    const void *y, void *out)
{
    if (op == PSIM_CE_EQUAL || op == PSIM_CE_LESS || op == PSIM_CE_GREATER)
        k_compare<T><<<grid_for(n), BLOCK, 0, s>>>(op, n, *b, (const T *)x, (const T *)y,
                                                    (bool *)out);
    else
        k_binary<T><<<grid_for(n), BLOCK, 0, s>>>(op, n, *b, (const T *)x, (const T *)y,
                                                   (T *)out);
    return (int)cudaGetLastError();
}

template <typename T>
static int where_t(cudaStream_t s, int64_t n, const PsimCudaBcast *b, const void *c,
                   const void *x, const void *y, void *out)
{
    k_where<T><<<grid_for(n), BLOCK, 0, s>>>(n, *b, (const bool *)c, (const T *)x, (const T *)y,
                                              (T *)out);
    return (int)cudaGetLastError();
}

extern "C" int psim__cuda_ew(void *stream, int op, int ct, int64_t n, const PsimCudaBcast *b,
                             const void *a, const void *bb, const void *c, void *out, double p0,
                             double p1)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (n <= 0)
        return 0;
    if (op == PSIM_CE_WHERE) {
        /* a: condition (bool); bb, c: the branches of type ct */
        switch (ct) {
        case PSIM_CT_F32: return where_t<float>(s, n, b, a, bb, c, out);
        case PSIM_CT_I64: return where_t<long long>(s, n, b, a, bb, c, out);
        case PSIM_CT_I32: return where_t<int>(s, n, b, a, bb, c, out);
        case PSIM_CT_BOOL: return where_t<bool>(s, n, b, a, bb, c, out);
        case PSIM_CT_F64: return where_t<double>(s, n, b, a, bb, c, out);
        }
        return (int)cudaErrorInvalidValue;
    }
    if (op >= PSIM_CE_SQRT) {
        if (op == PSIM_CE_NEG && ct == PSIM_CT_I64)
            k_neg<long long><<<grid_for(n), BLOCK, 0, s>>>(n, (const long long *)a, (long long *)out);
        else if (op == PSIM_CE_NEG && ct == PSIM_CT_I32)
            k_neg<int><<<grid_for(n), BLOCK, 0, s>>>(n, (const int *)a, (int *)out);
        else if (ct == PSIM_CT_F32)
            k_unary<<<grid_for(n), BLOCK, 0, s>>>(op, n, (const float *)a, (float *)out,
                                                   (float)p0, (float)p1);
        else
            return (int)cudaErrorInvalidValue;
        return (int)cudaGetLastError();
    }
    switch (ct) {
    case PSIM_CT_F32: return binary_t<float>(s, op, n, b, a, bb, out);
    case PSIM_CT_I64: return binary_t<long long>(s, op, n, b, a, bb, out);
    case PSIM_CT_I32: return binary_t<int>(s, op, n, b, a, bb, out);
    case PSIM_CT_F64:
        if (op == PSIM_CE_POW)
            return (int)cudaErrorInvalidValue;
        return binary_t<double>(s, op, n, b, a, bb, out);
    case PSIM_CT_BOOL:
        if (op != PSIM_CE_EQUAL)
            return (int)cudaErrorInvalidValue;
        return binary_t<bool>(s, op, n, b, a, bb, out);
    }
    return (int)cudaErrorInvalidValue;
}

/* --- Cast ---------------------------------------------------------------------------------- */

template <typename A, typename B> __global__ void k_cast(int64_t n, const A *x, B *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = (B)x[i];
}
template <typename A> __global__ void k_cast_bool(int64_t n, const A *x, bool *y)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i] != A(0);
}

template <typename A>
static int cast_from(cudaStream_t s, int to, int64_t n, const void *in, void *out)
{
    const A *x = (const A *)in;
    switch (to) {
    case PSIM_CT_F32: k_cast<A, float><<<grid_for(n), BLOCK, 0, s>>>(n, x, (float *)out); break;
    case PSIM_CT_F64: k_cast<A, double><<<grid_for(n), BLOCK, 0, s>>>(n, x, (double *)out); break;
    case PSIM_CT_I64:
        k_cast<A, long long><<<grid_for(n), BLOCK, 0, s>>>(n, x, (long long *)out);
        break;
    case PSIM_CT_I32: k_cast<A, int><<<grid_for(n), BLOCK, 0, s>>>(n, x, (int *)out); break;
    case PSIM_CT_BOOL: k_cast_bool<A><<<grid_for(n), BLOCK, 0, s>>>(n, x, (bool *)out); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int psim__cuda_cast(void *stream, int from, int to, int64_t n, const void *in,
                               void *out)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (n <= 0)
        return 0;
    switch (from) {
    case PSIM_CT_F32: return cast_from<float>(s, to, n, in, out);
    case PSIM_CT_F64: return cast_from<double>(s, to, n, in, out);
    case PSIM_CT_I64: return cast_from<long long>(s, to, n, in, out);
    case PSIM_CT_I32: return cast_from<int>(s, to, n, in, out);
    case PSIM_CT_BOOL: return cast_from<unsigned char>(s, to, n, in, out);
    }
    return (int)cudaErrorInvalidValue;
}

/* --- Index-map gather ---------------------------------------------------------------------- */
/* map[i] == 0: the pad value; else (map[i] - 1) is (source << 40) | element. */

template <typename T>
__global__ void k_gather_map(int64_t n, const int64_t *map, const T *const *srcs, const T *pad,
                             T *out)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t m = map[i];
        if (m == 0)
            out[i] = pad ? *pad : T(0);
        else {
            m -= 1;
            out[i] = srcs[m >> 40][m & (((int64_t)1 << 40) - 1)];
        }
    }
}

extern "C" int psim__cuda_gather_map(void *stream, size_t esize, int64_t n, const int64_t *map,
                                     const void *const *srcs, int n_src, const void *pad,
                                     void *out)
{
    (void)n_src;
    cudaStream_t s = (cudaStream_t)stream;
    if (n <= 0)
        return 0;
    switch (esize) {
    case 1:
        k_gather_map<unsigned char><<<grid_for(n), BLOCK, 0, s>>>(
            n, map, (const unsigned char *const *)srcs, (const unsigned char *)pad,
            (unsigned char *)out);
        break;
    case 2:
        k_gather_map<unsigned short><<<grid_for(n), BLOCK, 0, s>>>(
            n, map, (const unsigned short *const *)srcs, (const unsigned short *)pad,
            (unsigned short *)out);
        break;
    case 4:
        k_gather_map<unsigned int><<<grid_for(n), BLOCK, 0, s>>>(
            n, map, (const unsigned int *const *)srcs, (const unsigned int *)pad,
            (unsigned int *)out);
        break;
    case 8:
        k_gather_map<unsigned long long><<<grid_for(n), BLOCK, 0, s>>>(
            n, map, (const unsigned long long *const *)srcs, (const unsigned long long *)pad,
            (unsigned long long *)out);
        break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

/* --- ReduceSum / ReduceMean ---------------------------------------------------------------- */

typedef struct {
    int32_t rank;
    int64_t dims[PSIM_CUDA_MAX_RANK];
    int64_t strides[PSIM_CUDA_MAX_RANK];
    unsigned char reduced[PSIM_CUDA_MAX_RANK];
    int64_t count; /* elements reduced into each output */
} ReduceGeom;

__global__ void k_reduce(int mean, int64_t n_out, ReduceGeom g, const float *in, float *out)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n_out;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t base = 0, q = o;
        for (int d = g.rank - 1; d >= 0; d--)
            if (!g.reduced[d]) {
                base += (q % g.dims[d]) * g.strides[d];
                q /= g.dims[d];
            }
        double acc = 0;
        for (int64_t r = 0; r < g.count; r++) {
            int64_t off = base, p = r;
            for (int d = g.rank - 1; d >= 0; d--)
                if (g.reduced[d]) {
                    off += (p % g.dims[d]) * g.strides[d];
                    p /= g.dims[d];
                }
            acc += in[off];
        }
        out[o] = (float)(mean && g.count ? acc / (double)g.count : acc);
    }
}

extern "C" int psim__cuda_reduce(void *stream, int mean, int64_t n_out, int32_t rank,
                                 const int64_t *dims, const int64_t *in_strides,
                                 const unsigned char *reduced, const float *in, float *out)
{
    if (rank > PSIM_CUDA_MAX_RANK)
        return (int)cudaErrorInvalidValue;
    if (n_out <= 0)
        return 0;
    ReduceGeom g;
    memset(&g, 0, sizeof g);
    g.rank = rank;
    g.count = 1;
    for (int d = 0; d < rank; d++) {
        g.dims[d] = dims[d];
        g.strides[d] = in_strides[d];
        g.reduced[d] = reduced[d];
        if (reduced[d])
            g.count *= dims[d];
    }
    k_reduce<<<grid_for(n_out), BLOCK, 0, (cudaStream_t)stream>>>(mean, n_out, g, in, out);
    return (int)cudaGetLastError();
}

/* --- LayerNormalization: one block per row, two-pass in double for the statistics ---------- */

__global__ void k_layernorm(int64_t rows, int64_t cols, const float *x, const float *scale,
                            int64_t scale_n, const float *bias, int64_t bias_n, float eps,
                            float *y)
{
    __shared__ double red[BLOCK];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * cols;
        double s = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            s += xr[j];
        red[threadIdx.x] = s;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w /= 2) {
            if ((int)threadIdx.x < w)
                red[threadIdx.x] += red[threadIdx.x + w];
            __syncthreads();
        }
        double mu = red[0] / (double)cols;
        __syncthreads();
        double v = 0;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            double d = xr[j] - mu;
            v += d * d;
        }
        red[threadIdx.x] = v;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w /= 2) {
            if ((int)threadIdx.x < w)
                red[threadIdx.x] += red[threadIdx.x + w];
            __syncthreads();
        }
        float inv = (float)(1.0 / sqrt(red[0] / (double)cols + (double)eps));
        __syncthreads();
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            float z = (float)(xr[j] - mu) * inv;
            z *= scale[scale_n == 1 ? 0 : j];
            if (bias)
                z += bias[bias_n == 1 ? 0 : j];
            y[r * cols + j] = z;
        }
    }
}

extern "C" int psim__cuda_layernorm(void *stream, int64_t rows, int64_t cols, const float *x,
                                    const float *scale, int64_t scale_n, const float *bias,
                                    int64_t bias_n, float eps, float *y)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    unsigned g = (unsigned)(rows > 65535 ? 65535 : rows);
    k_layernorm<<<g, BLOCK, 0, (cudaStream_t)stream>>>(rows, cols, x, scale, scale_n, bias,
                                                      bias_n, eps, y);
    return (int)cudaGetLastError();
}

/* --- BatchNormalization (inference) for epsilons cuDNN refuses ----------------------------- */

__global__ void k_batchnorm(int64_t n, int64_t c, int64_t inner, const float *x,
                            const float *scale, const float *bias, const float *mean,
                            const float *var, float eps, float *y)
{
    int64_t total = n * c * inner;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = (i / inner) % c;
        y[i] = (x[i] - mean[ch]) / sqrtf(var[ch] + eps) * scale[ch] + bias[ch];
    }
}

extern "C" int psim__cuda_batchnorm(void *stream, int64_t n, int64_t c, int64_t inner,
                                    const float *x, const float *scale, const float *bias,
                                    const float *mean, const float *var, float eps, float *y)
{
    int64_t total = n * c * inner;
    if (total <= 0)
        return 0;
    k_batchnorm<<<grid_for(total), BLOCK, 0, (cudaStream_t)stream>>>(n, c, inner, x, scale,
                                                                     bias, mean, var, eps, y);
    return (int)cudaGetLastError();
}

/* --- 2-D pooling with any padding, ceil mode and (max) dilation ----------------------------- */

/* One thread per output element, the CPU kernel's rules (kernels/cpu/pool.c): max over the
 * window's positions inside the input (-inf when none); average over them, divided by their
 * count, or with count_include_pad by the window's extent inside the padded input. cuDNN pools
 * only with symmetric pads and floor rounding; this covers the rest. */
__global__ void k_pool2d(int is_max, int incl, int64_t nc, PsimCudaPool2d g, const float *x,
                         float *y)
{
    int64_t total = nc * g.oh * g.ow;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
        const float *xp = x + p * g.h * g.w;
        int64_t y0 = oy * g.sh - g.ph0, x0 = ox * g.sw - g.pw0;
        if (is_max) {
            float best = -INFINITY;
            bool any = false;
            for (int64_t a = 0; a < g.kh; a++) {
                int64_t iy = y0 + a * g.dh;
                if (iy < 0 || iy >= g.h)
                    continue;
                for (int64_t b = 0; b < g.kw; b++) {
                    int64_t ix = x0 + b * g.dw;
                    if (ix >= 0 && ix < g.w) {
                        float v = xp[iy * g.w + ix];
                        if (!any || v > best)
                            best = v;
                        any = true;
                    }
                }
            }
            y[i] = best;
            continue;
        }
        float sum = 0.0f;
        int64_t cnt = 0;
        for (int64_t a = 0; a < g.kh; a++) {
            int64_t iy = y0 + a;
            if (iy < 0 || iy >= g.h)
                continue;
            for (int64_t b = 0; b < g.kw; b++) {
                int64_t ix = x0 + b;
                if (ix >= 0 && ix < g.w) {
                    sum += xp[iy * g.w + ix];
                    cnt++;
                }
            }
        }
        if (incl) {
            int64_t hs = max(y0, -g.ph0), he = min(y0 + g.kh, g.h + g.ph1);
            int64_t ws = max(x0, -g.pw0), we = min(x0 + g.kw, g.w + g.pw1);
            cnt = max(he - hs, (int64_t)0) * max(we - ws, (int64_t)0);
        }
        y[i] = cnt > 0 ? sum / (float)cnt : 0.0f;
    }
}

extern "C" int psim__cuda_pool2d(void *stream, int is_max, int count_include_pad, int64_t nc,
                                 const PsimCudaPool2d *g, const float *x, float *y)
{
    int64_t total = nc * g->oh * g->ow;
    if (total <= 0)
        return 0;
    k_pool2d<<<grid_for(total), BLOCK, 0, (cudaStream_t)stream>>>(is_max, count_include_pad, nc,
                                                                  *g, x, y);
    return (int)cudaGetLastError();
}
