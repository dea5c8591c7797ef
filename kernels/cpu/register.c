/* The built-in CPU kernel set, registered once by the registry (kernels/registry.c). */
#include "cpu-private.h"

void psim__kernels_cpu_register(void)
{
    psim__cpu_register_elementwise();
    psim__cpu_register_matmul();
    psim__cpu_register_conv();
    psim__cpu_register_pool();
    psim__cpu_register_norm();
    psim__cpu_register_shape();
    psim__cpu_register_reduce();
    psim__cpu_register_tf();
    psim__cpu_register_index();
    psim__cpu_register_loss();
    psim__cpu_register_resize();
    psim__cpu_register_quant();
    psim__cpu_register_rnn();
    psim__cpu_register_state();
    psim__cpu_register_queue();
    psim__cpu_register_optim();
    psim__cpu_register_conv_grad();
    psim__cpu_register_grad();
}
