"""Repository rules that read the machine: the CUDA toolkit and whether a GPU is present.

local_cuda: finds the toolkit (CUDA_PATH, else /usr/local/cuda) and exposes
  @local_cuda//:defs.bzl  with NVCC (absolute path) and HAS_CUDA,
  @local_cuda//:cudart_static, the static CUDA runtime as a cc_library.
local_gpu: detects a usable NVIDIA GPU (/dev/nvidia0 plus `nvidia-smi -L`,
  overridable with FLASHCHECK_GPU=0/1) and defines a constraint value
  @local_gpu//:present and a platform @local_gpu//:host that carries it only
  when a GPU is there. GPU tests say target_compatible_with = ["@local_gpu//:present"];
  on a machine without a GPU, `bazel test //...` reports them SKIPPED.
"""

def _local_cuda_impl(rctx):
    cuda = rctx.os.environ.get("CUDA_PATH", "") or "/usr/local/cuda"
    nvcc = rctx.path(cuda + "/bin/nvcc")
    has = nvcc.exists
    if has:
        rctx.symlink(cuda + "/lib64/libcudart_static.a", "libcudart_static.a")
        rctx.symlink(cuda + "/include", "include")
        rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cudart_static",
    srcs = ["libcudart_static.a"],
    linkopts = ["-ldl", "-lpthread", "-lrt"],
)
# The runtime API headers, for host C code that allocates and copies device memory.
cc_library(
    name = "cuda_runtime",
    hdrs = glob(["include/*.h", "include/crt/*.h", "include/crt/*.hpp"]),
    includes = ["include"],
    deps = [":cudart_static"],
)
""")
    else:
        rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cudart_static")
cc_library(name = "cuda_runtime")
""")
    rctx.file("defs.bzl", "HAS_CUDA = %s\nNVCC = %r\nCUDA_PATH = %r\n" % (has, str(nvcc) if has else "", cuda))

local_cuda = repository_rule(
    implementation = _local_cuda_impl,
    environ = ["CUDA_PATH"],
    local = True,
)

def _local_gpu_impl(rctx):
    force = rctx.os.environ.get("FLASHCHECK_GPU", "")
    if force in ("0", "1"):
        has = force == "1"
        why = "FLASHCHECK_GPU=" + force
    else:
        has = False
        why = "no /dev/nvidia0"
        if rctx.path("/dev/nvidia0").exists:
            smi = rctx.which("nvidia-smi")
            if smi:
                r = rctx.execute([smi, "-L"], timeout = 20)
                has = r.return_code == 0 and "GPU" in r.stdout
                why = "nvidia-smi -L: " + (r.stdout.strip() or r.stderr.strip())
            else:
                why = "/dev/nvidia0 but no nvidia-smi"
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
# Detected: %s -> GPU present: %s
constraint_setting(name = "gpu")
constraint_value(name = "present", constraint_setting = ":gpu")
platform(
    name = "host",
    parents = ["@local_config_platform//:host"],
    constraint_values = %s,
)
# For building GPU binaries on a machine without a GPU (the GPU bundle): always carries the constraint.
platform(
    name = "with_gpu",
    parents = ["@local_config_platform//:host"],
    constraint_values = [":present"],
)
""" % (why, has, '[":present"]' if has else "[]"))
    rctx.file("defs.bzl", "HAS_GPU = %s\n" % has)

local_gpu = repository_rule(
    implementation = _local_gpu_impl,
    environ = ["FLASHCHECK_GPU"],
    local = True,
)
