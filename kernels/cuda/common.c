/* The CUDA device context (stream, cuBLAS and cuDNN handles, cuDNN workspace, uploads of host
 * constants), the error checks, and the registration hook the kernel registry calls when the
 * build has CUDA (psim__kernels_cuda_register). */
#include "cuda-private.h"

gboolean psim__cuda_fail(PsimKernelCtx *ctx, GError **error, const char *lib, const char *what,
                         const char *msg)
{
    if (ctx && ctx->graph && ctx->node)
        psim__error_node(error, ctx->graph, ctx->node, "%s error in %s: %s", lib, what, msg);
    else
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "%s error in %s: %s", lib, what, msg);
    if (error && *error)
        (*error)->code = PSIM_ERROR_RUNTIME;
    return FALSE;
}

PsimCudaDevice *psim__cuda_dev(const PsimKernelCtx *ctx)
{
    return ctx->device_context;
}

static void upload_free(gpointer p) { psim_tensor_unref(p); }

PsimCudaDevice *psim__cuda_device_new(int ordinal, GError **error)
{
    PsimCudaDevice *d = g_new0(PsimCudaDevice, 1);
    d->ordinal = ordinal;
    d->uploads = g_hash_table_new_full(g_direct_hash, g_direct_equal, upload_free, upload_free);
    d->step_uploads =
        g_hash_table_new_full(g_direct_hash, g_direct_equal, upload_free, upload_free);
    const char *what = NULL, *msg = NULL;
    cudaError_t ce;
    cublasStatus_t be;
    cudnnStatus_t de;
    if ((ce = cudaSetDevice(ordinal)) != cudaSuccess) {
        what = "cudaSetDevice";
        msg = cudaGetErrorString(ce);
    } else if ((ce = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        what = "cudaStreamCreate";
        msg = cudaGetErrorString(ce);
    } else if ((be = psim__cublas()->create(&d->cublas)) != CUBLAS_STATUS_SUCCESS) {
        what = "cublasCreate";
        msg = psim__cublas()->status_string(be);
    } else if ((be = psim__cublas()->set_stream(d->cublas, d->stream)) != CUBLAS_STATUS_SUCCESS ||
               /* Full FP32 math: TF32 tensor cores (CUBLAS_TF32_TENSOR_OP_MATH) would be the
                * one place to trade accuracy (about 1e-3 relative) for speed; not enabled. */
               (be = psim__cublas()->set_math_mode(d->cublas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) {
        what = "cublasSetStream";
        msg = psim__cublas()->status_string(be);
    } else if ((de = cudnnCreate(&d->cudnn)) != CUDNN_STATUS_SUCCESS ||
               (de = cudnnSetStream(d->cudnn, d->stream)) != CUDNN_STATUS_SUCCESS) {
        what = "cudnnCreate";
        msg = cudnnGetErrorString(de);
    }
    if (what) {
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME, "GPU:%d: %s failed: %s", ordinal, what,
                    msg);
        psim__cuda_device_free(d);
        return NULL;
    }
    return d;
}

void psim__cuda_device_free(PsimCudaDevice *d)
{
    if (!d)
        return;
    if (d->stream)
        cudaStreamSynchronize(d->stream);
    g_hash_table_destroy(d->uploads);
    g_hash_table_destroy(d->step_uploads);
    if (d->ws)
        cudaFree(d->ws);
    if (d->cudnn)
        cudnnDestroy(d->cudnn);
    if (d->cublas)
        psim__cublas()->destroy(d->cublas);
    if (d->stream)
        cudaStreamDestroy(d->stream);
    g_free(d);
}

static gboolean only_ours(gpointer key, gpointer value, gpointer user)
{
    (void)value;
    (void)user;
    return g_atomic_int_get(&((PsimTensor *)key)->refcount) == 1;
}

void psim__cuda_device_trim(PsimCudaDevice *d)
{
    g_hash_table_foreach_remove(d->uploads, only_ours, NULL);
    g_hash_table_remove_all(d->step_uploads);
}

const void *psim__cuda_in(PsimKernelCtx *ctx, int32_t k, GError **error)
{
    PsimTensor *t = psim__cpu_in(ctx, k);
    if (!t) {
        KERR(ctx, error, "%s needs input %d", ctx->node->op, k);
        return NULL;
    }
    if (t->device >= 0)
        return t->data;
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    PsimTensor *u = g_hash_table_lookup(d->uploads, t);
    if (!u)
        u = g_hash_table_lookup(d->step_uploads, t);
    if (u)
        return u->data;
    if (t->dtype == PSIM_DTYPE_STRING) {
        KERR(ctx, error, "string tensors cannot go to a GPU");
        return NULL;
    }
    GError *err = NULL;
    u = ctx->alloc(ctx, t->dtype, t->rank, t->dims, &err);
    if (!u) {
        KERR(ctx, error, "cannot upload input %d: %s", k, err->message);
        if (error && *error)
            (*error)->code = PSIM_ERROR_RUNTIME;
        g_error_free(err);
        return NULL;
    }
    cudaError_t ce = t->nbytes ? cudaMemcpyAsync(u->data, t->data, t->nbytes,
                                                 cudaMemcpyHostToDevice, d->stream)
                               : cudaSuccess;
    if (ce != cudaSuccess) {
        psim_tensor_unref(u);
        psim__cuda_fail(ctx, error, "CUDA", "cudaMemcpyAsync (upload)", cudaGetErrorString(ce));
        return NULL;
    }
    const PsimPort p = k < ctx->node->n_inputs ? ctx->node->inputs[k] : (PsimPort){-1, 0};
    const PsimNode *src = p.node >= 0 && p.node < psim_graph_n_nodes(ctx->graph)
                              ? psim_graph_node(ctx->graph, p.node)
                              : NULL;
    /* The graph's own known value (Const, initializers, folded shapes): immutable, kept as long
     * as someone else holds it. */
    gboolean constant = src && p.index >= 0 && p.index < src->n_outputs &&
                        src->outputs[p.index].value == t;
    g_hash_table_insert(constant ? d->uploads : d->step_uploads, psim_tensor_ref(t), u);
    return u->data;
}

PsimTensor *psim__cuda_to_host(PsimCudaDevice *d, PsimTensor *t, GError **error)
{
    if (t->device < 0)
        return psim_tensor_ref(t);
    PsimTensor *h = psim_tensor_new(t->dtype, t->rank, t->dims, error);
    if (!h)
        return NULL;
    cudaError_t ce = t->nbytes ? cudaMemcpyAsync(h->data, t->data, t->nbytes,
                                                 cudaMemcpyDeviceToHost, d->stream)
                               : cudaSuccess;
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(d->stream);
    if (ce != cudaSuccess) {
        psim_tensor_unref(h);
        g_set_error(error, PSIM_ERROR, PSIM_ERROR_RUNTIME,
                    "CUDA error copying a tensor to the host: %s", cudaGetErrorString(ce));
        return NULL;
    }
    return h;
}

void *psim__cuda_workspace(PsimKernelCtx *ctx, size_t bytes, GError **error)
{
    PsimCudaDevice *d = psim__cuda_dev(ctx);
    if (bytes <= d->ws_bytes)
        return d->ws;
    if (d->ws) {
        cudaStreamSynchronize(d->stream);
        cudaFree(d->ws);
        d->ws = NULL;
        d->ws_bytes = 0;
    }
    cudaError_t ce = cudaMalloc(&d->ws, bytes);
    if (ce != cudaSuccess) {
        d->ws = NULL;
        psim__cuda_fail(ctx, error, "CUDA", "cudaMalloc (workspace)", cudaGetErrorString(ce));
        return NULL;
    }
    d->ws_bytes = bytes;
    return d->ws;
}

void psim__kernels_cuda_register(void)
{
    psim__cuda_register_ops();
    psim__cuda_register_dnn();
}
