"""A trainer for the receipt tests: ``DataLoader(QueueDataset(url), num_workers=W)`` as a new user writes it.

argv: URL IDS_FILE KILL_AFTER BATCH WORKERS. Every id received is written to IDS_FILE (flushed);
after the item that brings the count to KILL_AFTER records (0: never) the trainer SIGKILLs itself;
BATCH is ``none`` (batch_size=None) or a batch size (default collate). At the end it writes
``ds.stats()`` to IDS_FILE.stats.json.
"""

import json
import os
import signal
import sys

from torch.utils.data import DataLoader

from torchx_datapipes.data import QueueDataset


def main() -> None:
    url, path, kill_after, batch, workers = (
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        sys.argv[4],
        int(sys.argv[5]),
    )
    ds = QueueDataset(url, group="train")
    kw = {"batch_size": None} if batch == "none" else {"batch_size": int(batch)}
    n = 0
    with open(path, "w") as f:
        for item in DataLoader(ds, num_workers=workers, **kw):
            got = [int(item["id"])] if batch == "none" else [int(i) for i in item["id"]]
            for i in got:
                f.write(f"{i}\n")
                f.flush()
                n += 1
            # the loop has the whole item (its records may be marked done at once): the kill comes after
            # the item's last record is written, never in the middle of a batch the loop received
            if kill_after and n >= kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
    with open(path + ".stats.json", "w") as f:
        json.dump(ds.stats(), f)


if __name__ == "__main__":
    main()
