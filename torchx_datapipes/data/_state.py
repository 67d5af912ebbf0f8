"""Checkpoint states of an :class:`OutputDataset` and :func:`merge_states` for elastic resume.

A worker's state (what ``state_dict()`` returns inside a DataLoader worker)::

    {"version": 2, "epoch", "seed", "shuffle", "shuffle_window", "even", "num_records", "chunks",
     "plan": [[a, b], ...], "world_size", "rank", "num_workers", "worker", "yielded"}

``chunks`` is a digest of the output's chunk sizes: the epoch order permutes chunks, so a state
only resumes over the same chunking (version 1 states, from before JSON Lines and tar chunks
were bounded in bytes, carry none and are refused).

A merged state has the same epoch keys and the plan of the records not yet served, and no
layout keys (rank, worker, ...): it loads on any world size and number of workers.
"""

import hashlib
from typing import Any, Dict, Iterator, List, Mapping, Sequence, Tuple

import numpy as np

from torchx_datapipes.data._plan import Interval, complement, plan_len, plan_slice, rank_span, split_span
from torchx_datapipes.errors import ReadError

VERSION = 2
EPOCH_KEYS = ("epoch", "seed", "shuffle", "shuffle_window", "even", "num_records", "chunks")
LAYOUT_KEYS = ("world_size", "rank", "num_workers", "worker", "yielded")
# StatefulDataLoader (torchdata 0.11) keys that make its worker snapshots lag behind
_STEPS_SINCE_SNAPSHOT = "_steps_since_snapshot"


def chunks_digest(sizes: Sequence[int]) -> str:
    """A short digest of the chunk sizes (in part order) that the epoch order is built from."""
    return hashlib.blake2b(np.asarray(sizes, dtype="<i8").tobytes(), digest_size=8).hexdigest()


def plan_to_json(plan: Sequence[Interval]) -> List[List[int]]:
    return [[int(a), int(b)] for a, b in plan]


def plan_from_json(value: Any, n: int) -> List[Interval]:
    try:
        plan = [(int(a), int(b)) for a, b in value]
    except (TypeError, ValueError) as e:
        raise ReadError(f"state 'plan' must be a list of [start, end] pairs, got {value!r}") from e
    prev = 0
    for a, b in plan:
        if not prev <= a < b <= n:
            raise ReadError(f"state 'plan' {value!r} is not sorted disjoint intervals within [0, {n})")
        prev = b
    return plan


def is_dataset_state(obj: Any) -> bool:
    return isinstance(obj, Mapping) and obj.get("version") == VERSION and "plan" in obj and "epoch" in obj


def _find_states(obj: Any) -> Iterator[Mapping[str, Any]]:
    """Dataset states inside a StatefulDataLoader ``state_dict()`` (any nesting), or ``obj`` itself."""
    if is_dataset_state(obj):
        yield obj
    elif isinstance(obj, Mapping):
        if obj.get(_STEPS_SINCE_SNAPSHOT):
            raise ReadError(
                f"a StatefulDataLoader state with {_STEPS_SINCE_SNAPSHOT}={obj[_STEPS_SINCE_SNAPSHOT]}:"
                " its worker snapshots lag behind the batches served, so the records served since"
                " are unknown; use snapshot_every_n_steps=1 (the default) for elastic checkpoints"
            )
        for v in obj.values():
            yield from _find_states(v)


def consumed(state: Mapping[str, Any]) -> List[Interval]:
    """Plan indices (of real records, not pads) that this worker state has served."""
    plan = plan_from_json(state["plan"], int(state["num_records"]))
    r = plan_len(plan)
    span = rank_span(r, int(state["world_size"]), int(state["rank"]), str(state["even"]))
    s, e = split_span(span[0], span[1] - span[0], int(state["num_workers"]), int(state["worker"]))
    done = min(s + int(state["yielded"]), e)
    return [(s, min(done, r))] if s < min(done, r) else []


def _check_same(states: Sequence[Mapping[str, Any]]) -> None:
    ref = states[0]
    for st in states[1:]:
        for key in (*EPOCH_KEYS, "plan", "world_size", "num_workers"):
            if st.get(key) != ref.get(key):
                raise ReadError(
                    f"states disagree on {key!r}: {ref.get(key)!r} vs {st.get(key)!r}; merge_states"
                    " takes the states of all ranks of ONE checkpoint (one epoch, one plan, one world size)"
                )


def _check_complete(states: Sequence[Mapping[str, Any]]) -> None:
    world, workers = int(states[0]["world_size"]), int(states[0]["num_workers"])
    seen: Dict[Tuple[int, int], int] = {}
    for st in states:
        slot = (int(st["rank"]), int(st["worker"]))
        if slot in seen and seen[slot] != st["yielded"]:
            raise ReadError(f"two different states for rank {slot[0]} worker {slot[1]}")
        seen[slot] = st["yielded"]
    missing = [(r, w) for r in range(world) for w in range(workers) if (r, w) not in seen]
    if missing:
        raise ReadError(
            f"states of (rank, worker) {missing} are missing (world_size {world}, {workers} workers):"
            " pass every rank's state, e.g. gathered with torch.distributed.all_gather_object"
        )


def merge_states(states: Sequence[Any]) -> Dict[str, Any]:
    """One state of the records not yet served, from the states of ALL ranks of a checkpoint.

    Each item is a rank's ``StatefulDataLoader.state_dict()`` (the per-worker dataset states are
    found inside it) or an ``OutputDataset.state_dict()``; merged states merge again (nested
    resumes). Load the result with ``OutputDataset.load_state_dict`` on any world size and
    number of workers: the rest of that epoch is served, each record once (``even="none"``).
    """
    found = [st for item in states for st in _find_states(item)]
    if not found:
        raise ReadError("no OutputDataset state found in the given states (is the dataset an OutputDataset?)")
    merged = [st for st in found if "rank" not in st]
    workers = [st for st in found if "rank" in st]
    if merged and workers:
        raise ReadError("cannot merge a merged state with worker states; merge the workers' states only")
    if merged:
        _check_same(merged)
        return dict(merged[0])
    _check_same(workers)
    _check_complete(workers)
    ref = workers[0]
    n = int(ref["num_records"])
    plan = plan_from_json(ref["plan"], n)
    done = [iv for st in workers for iv in consumed(st)]
    rest: List[Interval] = []
    for i, j in complement(done, plan_len(plan)):
        rest.extend(plan_slice(plan, i, j))
    out = {"version": VERSION, **{k: ref[k] for k in EPOCH_KEYS}, "plan": plan_to_json(_merge_adjacent(rest))}
    return out


def _merge_adjacent(plan: Sequence[Interval]) -> List[Interval]:
    out: List[Interval] = []
    for a, b in plan:
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out
