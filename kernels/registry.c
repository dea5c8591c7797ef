/* The kernel registry: (op, device type, dtype) -> PsimKernelDef, with dtype UNDEFINED as the
 * fallback that matches any dtype. Built-in kernels are registered on first use; plug-ins add
 * theirs from psim_plugin_init. Placement and the cost model ask psim_kernel_supported. */
#include "kernels-private.h"

#include "graph/graph-private.h"
#include "placesim/device.h"

#include <cblas.h>
#include <string.h>

static GHashTable *by_key; /* "op\x1fdevice\x1fdtype" -> const PsimKernelDef* (owned keys) */
static GHashTable *by_op;  /* "op\x1fdevice" -> const PsimKernelDef* (any dtype; first wins) */
static GMutex lock;

static char *make_key(const char *op, const char *device_type, int dtype)
{
    if (dtype < 0)
        return g_strdup_printf("%s\x1f%s", op, device_type);
    return g_strdup_printf("%s\x1f%s\x1f%d", op, device_type, dtype);
}

static void register_locked(const PsimKernelDef *def)
{
    g_hash_table_replace(by_key, make_key(def->op, def->device_type, def->dtype), (gpointer)def);
    char *k = make_key(def->op, def->device_type, -1);
    if (!g_hash_table_contains(by_op, k))
        g_hash_table_insert(by_op, k, (gpointer)def);
    else
        g_free(k);
}

/* OpenBLAS (the pthreads build Debian installs) starts its thread pool when it is loaded, and
 * the pool's threads spin, yielding, for about 2^28 cycles before they sleep: 0.1 s and more of
 * a second core at the start of every process, the core a 2-core machine runs a device, or a
 * plan's graph hash, on. placesim calls BLAS single-threaded, so the pool goes as soon as
 * placesim is loaded (after OpenBLAS, whose constructor made it); a later multi-threaded call
 * would start it again. */
extern int blas_thread_shutdown_(void) __attribute__((weak)); /* not in every OpenBLAS build */
__attribute__((constructor)) static void blas_pool_stop(void)
{
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_)
        blas_thread_shutdown_();
}

void psim__kernels_init(void)
{
    static gsize once = 0;
    if (g_once_init_enter(&once)) {
        /* BLAS runs single-threaded inside a device: devices are pinned to disjoint cores and an
         * OpenBLAS thread pool would oversubscribe them (blas_pool_stop set it at load too). */
        psim__blas_core_check();
        openblas_set_num_threads(1);
        by_key = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        by_op = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        /* The built-in classes' kernels; a plug-in's class registers its own. */
        int32_t n_classes, n_builtin;
        const PsimDeviceClass *const *classes = psim_device_classes(&n_classes, &n_builtin);
        for (int32_t i = 0; i < n_builtin; i++)
            if (classes[i]->register_kernels)
                classes[i]->register_kernels();
        g_once_init_leave(&once, 1);
    }
}

void psim__kernels_add(const PsimKernelDef *defs, size_t n)
{
    g_mutex_lock(&lock);
    for (size_t i = 0; i < n; i++)
        register_locked(&defs[i]);
    g_mutex_unlock(&lock);
}

void psim_kernel_register(const PsimKernelDef *def)
{
    g_return_if_fail(def && def->op && def->device_type && def->run);
    psim__kernels_init();
    g_mutex_lock(&lock);
    register_locked(def);
    g_mutex_unlock(&lock);
}

const PsimKernelDef *psim_kernel_lookup(const char *op, const char *device_type, PsimDType dtype)
{
    g_return_val_if_fail(op && device_type, NULL);
    psim__kernels_init();
    g_autofree char *k = make_key(op, device_type, dtype);
    g_autofree char *k0 = make_key(op, device_type, PSIM_DTYPE_UNDEFINED);
    g_mutex_lock(&lock);
    const PsimKernelDef *d = g_hash_table_lookup(by_key, k);
    if (!d)
        d = g_hash_table_lookup(by_key, k0);
    g_mutex_unlock(&lock);
    return d;
}

/* The dtype a node's kernel is chosen by: its first present data input's, else its first
 * output's. UNDEFINED when neither is known yet. */
static PsimDType node_dtype(const PsimGraph *g, const PsimNode *n)
{
    for (int32_t k = 0; k < n->n_inputs; k++) {
        PsimPort p = n->inputs[k];
        if (p.node < 0 || p.node >= psim_graph_n_nodes(g))
            continue;
        const PsimNode *src = psim_graph_node(g, p.node);
        if (p.index < src->n_outputs)
            return src->outputs[p.index].dtype;
        return PSIM_DTYPE_UNDEFINED;
    }
    return n->n_outputs > 0 ? n->outputs[0].dtype : PSIM_DTYPE_UNDEFINED;
}

const PsimKernelDef *psim_kernel_for_node(const PsimGraph *g, const PsimNode *n,
                                          const char *device_type)
{
    g_return_val_if_fail(g && n && device_type, NULL);
    PsimDType dt = node_dtype(g, n);
    const PsimKernelDef *d = psim_kernel_lookup(n->op, device_type, dt);
    if (d || dt != PSIM_DTYPE_UNDEFINED)
        return d;
    /* Dtype not known before run time: any kernel for the op on that device. */
    g_autofree char *k = make_key(n->op, device_type, -1);
    g_mutex_lock(&lock);
    d = g_hash_table_lookup(by_op, k);
    g_mutex_unlock(&lock);
    return d;
}

gboolean psim_kernel_supported(const PsimGraph *g, const PsimNode *n, const char *device_type)
{
    g_return_val_if_fail(g && n && device_type, FALSE);
    const PsimOpDef *od = psim_op_lookup(n->op);
    if (od && (od->flags & PSIM_OP_ABSTRACT))
        return FALSE;
    /* Placeholders have no kernel: the executor puts the feed on whatever device holds them. */
    if (!strcmp(n->op, "Placeholder") || (n->flags & PSIM_NODE_FED))
        return TRUE;
    return psim_kernel_for_node(g, n, device_type) != NULL;
}

static int cmp_def(const void *a, const void *b)
{
    const PsimKernelDef *x = *(const PsimKernelDef *const *)a;
    const PsimKernelDef *y = *(const PsimKernelDef *const *)b;
    int c = strcmp(x->op, y->op);
    if (!c)
        c = strcmp(x->device_type, y->device_type);
    if (!c)
        c = (int)x->dtype - (int)y->dtype;
    return c;
}

const PsimKernelDef **psim_kernel_list(int32_t *n)
{
    psim__kernels_init();
    g_mutex_lock(&lock);
    guint len = g_hash_table_size(by_key), i = 0;
    const PsimKernelDef **v = g_new(const PsimKernelDef *, len + 1);
    GHashTableIter it;
    gpointer key, val;
    g_hash_table_iter_init(&it, by_key);
    while (g_hash_table_iter_next(&it, &key, &val))
        v[i++] = val;
    g_mutex_unlock(&lock);
    v[len] = NULL;
    qsort(v, len, sizeof *v, cmp_def);
    if (n)
        *n = (int32_t)len;
    return v;
}
