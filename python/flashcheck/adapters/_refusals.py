"""Which errors of a wrapped implementation are its own explicit refusals of a problem (a decline:
flashcheck.Unsupported, SKIP) rather than a failure. Kept free of torch so it is testable anywhere.

Each entry is the text of a check the implementation makes BEFORE launching anything:
  "No available kernel"        torch SDPA's dispatcher (sdp_utils.cpp select_sdp_backend:
                               TORCH_CHECK(!print_debug, "No available kernel. Aborting execution."))
                               when the forced backend's constraints reject the inputs
  "not correctly aligned"      the memory-efficient kernel's Kernel::check_supported (operand
                               alignment of pointers and strides)
  "no kernel found to launch"  the memory-efficient kernel's dispatcher (attention.cu
                               _efficient_attention_forward: dispatch_cutlassF tries every kernel
                               whose alignment the operands meet, then TORCH_CHECK(kernel_launched,
                               "cutlassF: no kernel found to launch!"); cutlassB in the backward)
A device fault ("CUDA error: misaligned address") is never a refusal: the kernel ran.
"""

REFUSALS = ("No available kernel", "not correctly aligned", "no kernel found to launch")


def refusal(text):
    """The first line of text when it is one of the explicit refusals above, else None."""
    text = str(text)
    if text.lstrip().startswith("CUDA error"):
        return None
    if any(r in text for r in REFUSALS):
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return lines[0].strip() if lines else text
    return None
