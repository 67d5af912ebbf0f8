"""``OutputNode``: an :class:`OutputDataset` rank's records as a ``torchdata.nodes`` source.

It runs in one process (as worker 0 of 1); its state is the dataset's state, so
``torchdata.nodes.Loader(...).state_dict()`` checkpoints it and ``merge_states`` merges it.
"""

from typing import Any, Dict, Iterator, Optional, Protocol

from torchdata.nodes import BaseNode


class _Source(Protocol):
    """What the node needs of an :class:`OutputDataset` (a protocol, so ``node`` never imports ``dataset``,
    not even for type checking: no import cycle)."""

    def _iterate(self, worker: int, workers: int) -> Iterator[Dict[str, Any]]: ...

    def state_dict(self) -> Dict[str, Any]: ...

    def load_state_dict(self, state: Dict[str, Any]) -> None: ...


class OutputNode(BaseNode[Dict[str, Any]]):
    def __init__(self, dataset: _Source) -> None:
        super().__init__()
        self.dataset = dataset
        self._it: Optional[Iterator[Dict[str, Any]]] = None

    def reset(self, initial_state: Optional[Dict[str, Any]] = None) -> None:
        super().reset(initial_state)
        if self._it is not None:
            close = getattr(self._it, "close", None)
            if close is not None:
                close()
        if initial_state is not None:
            self.dataset.load_state_dict(initial_state)
        self._it = self.dataset._iterate(0, 1)

    def next(self) -> Dict[str, Any]:
        if self._it is None:
            raise RuntimeError("OutputNode.next() before reset()")
        return next(self._it)

    def get_state(self) -> Dict[str, Any]:
        return self.dataset.state_dict()
