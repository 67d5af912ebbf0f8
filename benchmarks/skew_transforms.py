"""The transform of ``bench_skew.py``: burn each record's ``cost_us`` of this thread's CPU time.

Thread CPU time (not wall time) is what is burnt, so the work is the same however many
processes share the cores, and the total CPU work of a data set is ``sum(cost_us)``.
"""

import time
from typing import Any, Dict


def burn(rec: Dict[str, Any]) -> Dict[str, Any]:
    end = time.thread_time() + rec["cost_us"] * 1e-6
    while time.thread_time() < end:
        pass
    return {"id": rec["id"], "unit": rec["unit"], "cost_us": rec["cost_us"]}
