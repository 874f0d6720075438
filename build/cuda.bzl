"""cuda_library: compile .cu files with nvcc into objects a cc target links.

Each .cu becomes one object (genrule running nvcc, relocatable device code off,
fatbinary for sm_80 and sm_90a plus PTX for forward compatibility); a cc_library
wraps the objects with the static CUDA runtime. Host code that calls into it
sees only C headers (extern "C").
"""

load("@local_cuda//:defs.bzl", "HAS_CUDA", "NVCC")
load("@rules_cc//cc:defs.bzl", "cc_library")

# Default: SASS for sm_80 (A100 class) and sm_90a (H100/H200), plus sm_90a PTX.
# `--define=cuda_archs=sm_90a` builds sm_90a alone (the GPU bundle for an H100 host uses it: half the size).
CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_90a,code=compute_90a",
]
CUDA_ARCH_FLAGS_SM90A = ["-gencode=arch=compute_90a,code=sm_90a"]

def _nvcc_cmd(src, copts, arch_flags):
    return [
        NVCC,
        "-c",
        "-O3",
        "-std=c++17",
        "-Xcompiler=-fPIC,-Wall",
        "-Xptxas=-warn-spills",
        "-lineinfo",
        "--compress-mode=size",  # fatbinary ~4x smaller (12 MB -> 2.7 MB per binary), decompressed once at load
        "-I.",
        "-I$(GENDIR)",
    ] + arch_flags + copts + ["-o $@", "$(location %s)" % src]

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], textual_hdrs = [], **kwargs):
    if not HAS_CUDA:
        fail("cuda_library %s: no CUDA toolkit found (set CUDA_PATH or install it at /usr/local/cuda)" % name)
    objs = []
    for src in srcs:
        base = src.replace("/", "_").replace(".cu", "")
        obj = "_objs_cuda/%s/%s.o" % (name, base)
        native.genrule(
            name = "%s_%s_nvcc" % (name, base),
            srcs = [src] + hdrs + textual_hdrs,
            outs = [obj],
            cmd = select({
                "//build:cuda_archs_sm90a": " ".join(_nvcc_cmd(src, copts, CUDA_ARCH_FLAGS_SM90A)),
                "//conditions:default": " ".join(_nvcc_cmd(src, copts, CUDA_ARCH_FLAGS)),
            }),
            message = "nvcc %s" % src,
        )
        objs.append(obj)
    cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart_static"],
        linkopts = ["-lstdc++", "-lm"],
        # Never a per-library .so: its device code must link against the static cudart in one image.
        linkstatic = True,
        **kwargs
    )
