"""The generic runner app launched by torchrun: ``python -m torchx_datapipes.runner <op> ...``."""
