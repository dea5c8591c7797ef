/* Device classes: everything placesim does differently per kind of device, as one struct of
 * functions per kind (in the spirit of ggml's backend interface and StarPU's drivers). The
 * built-in classes are CPU (devices/cpu/) and GPU driven by CUDA (devices/cuda/); the one table
 * that lists them is devices/registry.c. A device whose type has no class (the abstract
 * processors "P1", "P2" of task graphs) has cls == NULL: it is simulated from given costs and
 * never runs.
 *
 * Nothing outside a class's folder asks which kind a device is: cluster/, cost/, kernels/,
 * profiler/, sim/ and exec/ read the class's properties and call its hooks. Adding a kind is
 * one new folder defining a PsimDeviceClass and one line in devices/registry.c (docs/exec.md).
 *
 * The class sits below every layer that uses it (cluster/ finds it by type); its hooks are
 * implemented in the class's folder with whatever layer they serve, so the struct names the
 * upper layers' types only as incomplete structs. */
#ifndef PLACESIM_DEVICE_H
#define PLACESIM_DEVICE_H

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

struct PsimCluster;
struct PsimDevice;
struct PsimFingerprint;
struct PsimProfiler;
struct PsimProfileReport;
struct PsimWorker;
struct PsimWorkerClass;

/* One timed run of a kernel for PsimDeviceClass.time_runs: runs it once (launches it, for an
 * asynchronous device) and releases what the previous run left; FALSE with an error. */
typedef gboolean (*PsimTimedRunFn)(void *user, GError **error);

typedef struct PsimDeviceClass {
    const char *type; /* device type in names and files ("CPU", "GPU"; matched ignoring case)
                         and the kernel registry's key */
    const char *description;

    /* --- what the model assumes until the device is calibrated (cluster/) ------------------- */
    double peak_gflops, mem_bw_GBps;
    double launch_us; /* fixed cost of a kernel launch */
    /* Devices are numbered by their driver: a cluster file's device of the class without a
     * gpu_ordinal (or with -1) is the driver's device of its index (CUDA). */
    gboolean ordinal_is_index;
    /* Appends this machine's devices of the class to a cluster (the `local` cluster) and returns
     * how many; NULL: the class has no devices of its own to find (CPU devices are carved out of
     * the host's cores by `local:N`). */
    int32_t (*detect)(struct PsimCluster *c);

    /* --- properties the layers above read instead of asking for a kind ----------------------- */
    /* The host: kernels run on a thread pinned to the device's cores, tensors live in host
     * memory. Such a device is the default of a single-device session, is profiled in situ and
     * with cold weights, and its copies to other host devices are the `local` links. */
    gboolean host;
    /* Kernels run asynchronously on compute streams (the simulator's --gpu-streams applies). */
    gboolean streams;

    /* --- identity of measurements (cost/) --------------------------------------------------- */
    /* Fills f's cpu_model, gpu_name, driver_version, library_versions and n_cores for device d
     * (the digest is made by the caller). */
    void (*fingerprint)(const struct PsimDevice *d, struct PsimFingerprint *f);

    /* --- running (exec/) -------------------------------------------------------------------- */
    /* The worker hooks (thread set-up, memory, copies, synchronisation); NULL: the executor
     * cannot run devices of the class in this build. */
    const struct PsimWorkerClass *worker;

    /* --- measuring (profiler/) -------------------------------------------------------------- */
    /* Name of the timer of time_runs, stored in the cost DB's rows ("cupti"); NULL: kernels are
     * timed by the profiler's host clock (the runs are synchronous). */
    const char *timer;
    /* Times n runs of a kernel on worker w: us[i] gets run i's device time (0 when it did no
     * device work). Runs on w's thread. NULL: the host clock times each run. */
    gboolean (*time_runs)(struct PsimWorker *w, int32_t n, PsimTimedRunFn run, void *user,
                          double *us, GError **error);
    /* Measures device `device`'s peak rates into the cost DB (NULL: none to measure). */
    gboolean (*calibrate)(struct PsimProfiler *p, int32_t device, struct PsimProfileReport *report,
                          GError **error);
    /* Measures the links between the class's devices and the host into the cost DB (NULL: the
     * profiler's own host-to-host copies are all there is). */
    gboolean (*profile_links)(struct PsimProfiler *p, struct PsimProfileReport *report,
                              GError **error);

    /* --- kernels (kernels/) ----------------------------------------------------------------- */
    /* Registers the class's kernels (psim_kernel_register); called once: for a built-in class
     * at the kernel registry's first use, for a plug-in's by psim_device_class_register. NULL:
     * none. */
    void (*register_kernels)(void);
} PsimDeviceClass;

/* The class of devices of `type` (ignoring case), or NULL. */
const PsimDeviceClass *psim_device_class_find(const char *type);
/* The registered classes: the built-ins (*n_builtin of them, may be NULL), then those of
 * plug-ins, in registration order. */
const PsimDeviceClass *const *psim_device_classes(int32_t *n, int32_t *n_builtin);
/* The host's class (the first built-in with `host`): the device of a worker made without a
 * device. */
const PsimDeviceClass *psim_device_class_host(void);
/* Adds a class at run time (a plug-in's psim_plugin_init): devices of its type added to a
 * cluster afterwards are its own, and its register_kernels runs now. cls must live as long as
 * the process. A USAGE error when a class of that type exists. */
gboolean psim_device_class_register(const PsimDeviceClass *cls, GError **error);

G_END_DECLS

#endif
