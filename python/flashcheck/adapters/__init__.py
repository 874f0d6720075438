"""Ready-made py backends: torch_sdpa (flash, cudnn, efficient, math), flex (FlexAttention)."""
