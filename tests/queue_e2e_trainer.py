"""A trainer for the queue end-to-end tests: run by torchrun, one QueueDataset per rank, 2 workers each.

argv: URL OUTDIR. Writes OUTDIR/ready-r{rank}-a{attempt} before iterating, every record id to
ids-r{rank}-a{attempt}.txt (flushed), and done-r{rank}-a{attempt}.json when iteration ended by itself.
TDP_KILL_RANK1_AFTER=N: rank 1 SIGKILLs itself after N records in the first attempt.
TDP_SLEEP_S: seconds per record (a slow trainer).
"""

import json
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader

from torchx_datapipes.data import QueueDataset


def main() -> None:
    url, outdir = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    kill_after = int(os.environ.get("TDP_KILL_RANK1_AFTER", "0"))
    sleep_s = float(os.environ.get("TDP_SLEEP_S", "0"))
    tag = f"r{rank}-a{attempt}"
    loader = DataLoader(QueueDataset(url, group="train"), batch_size=None, num_workers=2)
    open(os.path.join(outdir, f"ready-{tag}"), "w").close()
    n, first, t0 = 0, None, time.time()
    with open(os.path.join(outdir, f"ids-{tag}.txt"), "w") as f:
        for rec in loader:
            first = first or time.time()
            x = rec["x"]
            assert isinstance(x, torch.Tensor) and x.dtype == torch.float64 and x.shape == (3, 4), x
            assert float(x[0, 0]) == rec["id"] % 7
            f.write(f"{rec['id']}\n")
            f.flush()
            n += 1
            if kill_after and rank == 1 and attempt == 0 and n == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            if sleep_s:
                time.sleep(sleep_s)
    with open(os.path.join(outdir, f"done-{tag}.json"), "w") as f:
        json.dump({"records": n, "first_record_at": first, "started_at": t0, "ended_at": time.time()}, f)


if __name__ == "__main__":
    main()
