"""torchx_datapipes: run a Python data transform as a distributed TorchX job.

Non-goals: this package is not a scheduler or a distributed engine. TorchX launches the
job and torch elastic (torchrun) runs the ranks; we only plan the work, ship the user's
function and commit the output atomically.
"""

from torchx_datapipes.kinds import FnKind, batched, kind_of, pipeline

__version__ = "0.1.0"

__all__ = ["FnKind", "__version__", "batched", "kind_of", "pipeline"]
