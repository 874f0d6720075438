/* fake_cuda_backend.c: the CPU backend's table declaring CUDA memory, as a .so: lets a test
 * on a machine without a GPU see what `flashcheck fuzz` decides for a CUDA backend (the
 * default number of workers; the harness's failed CUDA allocations are harness errors, never
 * findings). Its kernels are never reached: the harness cannot feed it without a GPU. */
#include "kernels/flash_api.h"

const fa_backend *fa_backend_export(void);

const fa_backend *fa_backend_export(void)
{
    static fa_backend b;
    b = *fa_backend_cpu();
    b.name = "fakecuda";
    b.memspace = FA_MEM_CUDA;
    return &b;
}
