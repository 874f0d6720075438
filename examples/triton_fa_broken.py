"""The deliberately broken copy of triton_fa.py: the last key block is not masked at the end of
the sequence (ragged tail), so when Sk is not a multiple of the block size the zero-filled keys
past the end take part in the softmax. `flashcheck fuzz --backend py:examples/triton_fa_broken.py:attention`
must find it (python/README.md has the measured time)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import triton_fa  # noqa: E402

attention = triton_fa.make(ragged_tail=False)
