"""Exception types shared by the bridge and kernels (import-light: no numpy, no torch)."""


class Unsupported(Exception):
    """Raise from a kernel for a valid case it does not implement (a head dim, a mask
    kind, a causal mode ...). The harness records the case as SKIP (FA_ERR_UNSUPPORTED),
    never as a failure. Any other exception is a failed case."""
