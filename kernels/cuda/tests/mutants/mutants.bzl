"""cuda_mutant: one deliberately broken copy of the CUDA backend as a loadable .so (test only).

A mutant is a textual patch (NAME.mutant: file, exact original snippet, replacement; see
apply_mutant.py) applied at build time to a COPY of the shipped sources: the shipped library and
its sources carry no marker, #ifdef or switch. The .cu files the patch touches (or, for a patched
header, the ones named in `compile`) are recompiled for sm_90a only (the H100/H200: these backends
are for the GPU mutation test there); every other object is the shipped backend's own
(//kernels/cuda:cuda_backend), linked unchanged. The result, lib<name>.so, exports only
fa_backend_export (the backend table, named "cuda-mutant-<name>") and is loaded by path
(`flashcheck certify --backend lib<name>.so`).

Every target is testonly and GPU-only (target_compatible_with @local_gpu//:present): CI without a
GPU builds none of them; //ci:gpu_bundle builds them as data of the GPU mutation test.
"""

load("@local_cuda//:defs.bzl", "NVCC")
load("@rules_cc//cc:defs.bzl", "cc_binary")

# The shipped backend's sources (//kernels/cuda:cuda_backend srcs), relative to kernels/cuda.
BACKEND_SRCS = [
    "backend.cu",
    "bwd/bwd_host.cu",
    "bwd/bwd_sm80.cu",
    "bwd/bwd_sm90.cu",
    "fwd/fwd_decode.cu",
    "fwd/fwd_host.cu",
    "fwd/fwd_sm80.cu",
    "fwd/fwd_sm90.cu",
    "fwd/fwd_sm90_ws.cu",
]

# Everything a backend .cu may include, relative to the workspace root.
BACKEND_HDRS = [
    "//kernels:flash_api.h",
    "//kernels/cuda:cuda_backend.h",
    "//kernels/cuda:testing.h",
    "//kernels/cuda:bwd/bwd_common.cuh",
    "//kernels/cuda:common/gmma.h",
    "//kernels/cuda:common/limits.h",
    "//kernels/cuda:common/pairs.h",
    "//kernels/cuda:common/ptx.h",
    "//kernels/cuda:common/tma.h",
    "//kernels/cuda:fwd/fwd_common.cuh",
    "//kernels/cuda:fwd/fwd_tiles.h",
    "//kernels/cuda:fwd/fwd_ws.h",
]

GPU = ["@local_gpu//:present"]

def _base(src):
    return src.replace("/", "_").replace(".cu", "")

def cuda_mutant(name, files = [], compile = None):
    """name: the mutant (NAME.mutant beside this file); files: the sources it patches, relative to
    kernels/cuda; compile: the .cu files (relative to kernels/cuda) to rebuild from the patched copy
    (default: the .cu among `files`). files = []: the unmutated control (shipped objects only)."""
    if compile == None:
        compile = [f for f in files if f.endswith(".cu")]
    for c in compile:
        if c not in BACKEND_SRCS:
            fail("cuda_mutant %s: %s is not a source of //kernels/cuda:cuda_backend" % (name, c))
    root = "_mut/%s" % name
    patched = ["%s/kernels/cuda/%s" % (root, f) for f in files]
    if files:
        native.genrule(
            name = name + "_patch",
            testonly = True,
            srcs = [name + ".mutant"] + ["//kernels/cuda:" + f for f in files],
            outs = patched,
            tools = ["apply_mutant.py"],
            cmd = "python3 $(location apply_mutant.py) $(location %s.mutant) $(RULEDIR)/%s %s" % (
                name,
                root,
                " ".join(["kernels/cuda/" + f for f in files]),
            ),
            target_compatible_with = GPU,
            message = "mutant %s: patching a copy of %s" % (name, ", ".join(files)),
        )
    objs = []
    for src in BACKEND_SRCS:
        if src not in compile:
            objs.append("//kernels/cuda:_objs_cuda/cuda_backend/%s.o" % _base(src))
            continue
        cu = ("%s/kernels/cuda/%s" % (root, src)) if src in files else ("//kernels/cuda:" + src)
        obj = "%s/obj/%s.o" % (root, _base(src))
        native.genrule(
            name = "%s_%s_nvcc" % (name, _base(src)),
            testonly = True,
            srcs = [cu] + [x for x in patched if x != cu] + BACKEND_HDRS,
            outs = [obj],
            # the patched copies come first on the include path: "kernels/cuda/..." resolves there
            cmd = " ".join([
                NVCC,
                "-c",
                "-O3",
                "-std=c++17",
                "-Xcompiler=-fPIC,-Wall",
                "-lineinfo",
                "--compress-mode=size",
                "-I$(RULEDIR)/" + root,
                "-I.",
                "-I$(GENDIR)",
                "-gencode=arch=compute_90a,code=sm_90a",
                "-o $@",
                "$(location %s)" % cu,
            ]),
            target_compatible_with = GPU,
            message = "nvcc (mutant %s) %s" % (name, src),
        )
        objs.append(obj)
    cc_binary(
        name = "lib%s.so" % name,
        testonly = True,
        srcs = ["mutant_export.c"] + objs,
        linkshared = 1,
        local_defines = ["FC_MUTANT_NAME=\\\"cuda-mutant-%s\\\"" % name],
        additional_linker_inputs = ["mutant_export.lds"],
        # only fa_backend_export leaves the .so, and its own calls bind inside it (not to the
        # shipped backend linked into the flashcheck that loads it)
        linkopts = [
            "-Wl,--version-script=$(location mutant_export.lds)",
            "-Wl,-Bsymbolic",
            "-lstdc++",
            "-lm",
        ],
        deps = [
            "//kernels:api",
            "@local_cuda//:cudart_static",
        ],
        target_compatible_with = GPU,
    )
