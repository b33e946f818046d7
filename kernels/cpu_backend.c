/* The CPU backend's table: every op of kernels/bk_ops.def, bk_cpu_NAME. */
#include "kernels/cpu_ops.h"

static const bk_backend cpu_backend = {
    .name = "cpu",
    .device = BK_CPU,
    .attention_tiled_min_t = BK_CPU_ATTENTION_TILED_MIN_T,
#define BK_OP(ret, name, params) .name = bk_cpu_##name,
#include "kernels/bk_ops.def"
#undef BK_OP
};

const bk_backend *bk_cpu(void) { return &cpu_backend; }
