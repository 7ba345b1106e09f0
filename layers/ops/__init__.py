"""The differentiable ops, one family per file; each op's NumPy forward, GPU forward and backward
live together in one Function subclass. `layers.functional` is the user-facing spelling."""
