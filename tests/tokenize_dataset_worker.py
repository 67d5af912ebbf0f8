"""The tokenize tests' small corpus and tokenizer, and (run under torchrun) a TokenDataset reader rank.

``torchrun --standalone --nproc_per_node 2 tests/tokenize_dataset_worker.py OUT SEQ_LEN RESULT``:
each rank reads its windows of ``OUT`` through a DataLoader of 2 workers, for epochs 0 and 1
(shuffled), and writes them to ``RESULT.rank<R>.json``.
"""

import json
import random
import sys
from pathlib import Path
from typing import Any, Dict, List

WORDS = (
    "the quick brown fox jumps over lazy dog alpha beta gamma delta tokens shard megatron river "
    "café naïve über straße 東京 ☃"
).split()


def texts(n: int, seed: int = 0) -> List[str]:
    """``n`` documents of 0 to 40 words (some empty), with non-ASCII text."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.choice([0, *range(1, 41)]))) for _ in range(n)]


def build_tokenizer(path: Path, vocab_size: int = 400) -> Path:
    """A byte-level BPE tokenizer trained on this corpus, saved as a ``tokenizer.json`` (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts(500), trainer)
    tok.save(str(path))
    return path


def write_corpus(root: Path, sizes: List[int]) -> List[str]:
    """``root/part-K.jsonl`` with ``{"id", "text"}`` records; returns the texts in input order."""
    root.mkdir(parents=True, exist_ok=True)
    out: List[str] = []
    for k, n in enumerate(sizes):
        docs = texts(n, seed=k + 1)
        with open(root / f"part-{k}.jsonl", "w", encoding="utf-8") as fh:
            for i, t in enumerate(docs):
                fh.write(json.dumps({"id": len(out) + i, "text": t}, ensure_ascii=False) + "\n")
        out.extend(docs)
    return out


def main(out: str, seq_len: int, result: str) -> None:
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    from torchx_datapipes.data import TokenDataset

    dist.init_process_group("gloo")
    ds = TokenDataset(out, seq_len=seq_len, shuffle=True, seed=7)
    epochs: Dict[str, List[Dict[str, Any]]] = {}
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        items = []
        for item in DataLoader(ds, batch_size=None, num_workers=2):
            items.append({k: v.tolist() for k, v in item.items()})
        epochs[str(epoch)] = items
    rank = dist.get_rank()
    Path(f"{result}.rank{rank}.json").write_text(json.dumps({"len": len(ds), "epochs": epochs}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
