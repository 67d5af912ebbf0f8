"""Benchmark ``datapipes.tokenize`` (issue 31) against references measured in the same run.

Rows, per corpus size (documents of 60 to 400 words, JSON Lines, 4 files):

- ``launch floor``: a no-op ``torchx run -s local_cwd dist.ddp -j J`` (init gloo, barrier);
- ``tokenize -j J``: ``torchx run -s local_cwd datapipes.tokenize``, Megatron shards, end to end;
- ``encode_batch x1``: ``tokenizers`` ``encode_batch`` in one process (read, encode, write .npy);
- ``encode_batch x2``: the same split over two processes (``multiprocessing.Pool(2)``, a file each);
- ``encode_batch_fast x2``: the same with ``encode_batch_fast`` (no character offsets), the call
  ``tokenize`` makes, so the gap to it is our overhead alone;
- ``datatrove x2``: datatrove's ``DocumentTokenizer`` (2 tasks, 2 workers), and its
  ``MegatronDocumentTokenizer`` when the installed datatrove has it.

Every row's wall time is a whole subprocess (interpreter start and imports included), so rows
compare what a user waits for. Tokens/s = the corpus' tokens / wall time. The crossover is the
smallest size at which ``tokenize -j J`` beats ``encode_batch x1``.

``python benchmarks/bench_tokenize.py [--sizes 20000,100000,400000] [--j 1x2]``
(needs the ``tokenize`` and ``bench`` extras and datatrove).
"""

import argparse
import json
import random
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Dict, List, Optional

from _common import REPO_ROOT, BenchRow, Measurement, measure_ddp_job, run_measured, torchx_cmd

FILES = 4
_WORDS = [
    "".join(
        random.Random(i).choice("abcdefghijklmnopqrstuvwxyz") for _ in range(random.Random(-i).randint(2, 9))
    )
    for i in range(5000)
]

_ENCODE = textwrap.dedent(
    """
    import json, sys, time, numpy as np
    from multiprocessing import Pool
    from tokenizers import Tokenizer
    tok_path, out, procs, method = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    files = sys.argv[5:]
    def run(f):
        tok = Tokenizer.from_file(tok_path)
        eos = tok.token_to_id("</s>")
        texts = [json.loads(line)["text"] for line in open(f, encoding="utf-8")]
        n, arrs = 0, []
        for i in range(0, len(texts), 1024):
            for e in getattr(tok, method)(texts[i : i + 1024]):
                arrs.append(np.array(e.ids + [eos], dtype=np.uint16))
        data = np.concatenate(arrs)
        np.save(f"{out}/{f.rsplit('/', 1)[-1]}.npy", data)
        return len(data)
    if procs == 1:
        total = sum(run(f) for f in files)
    else:
        with Pool(procs) as pool:
            total = sum(pool.map(run, files))
    print(json.dumps({"tokens": total}))
    """
)

_DATATROVE = textwrap.dedent(
    """
    import json, sys
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    kind, data, tok, out = sys.argv[1:5]
    if kind == "megatron":
        from datatrove.pipeline.tokens.megatron_tokenizer import MegatronDocumentTokenizer as T
        step = T(output_folder=out, tokenizer_name_or_path=tok, eos_token="</s>", batch_size=1024)
    else:
        from datatrove.pipeline.tokens import DocumentTokenizer as T
        step = T(output_folder=out, tokenizer_name_or_path=tok, eos_token="</s>", batch_size=1024)
    LocalPipelineExecutor(pipeline=[JsonlReader(data), step], tasks=2, workers=2,
                          logging_dir=out + "/_logs").run()
    print(json.dumps({"ok": True}))
    """
)


def make_corpus(root: Path, docs: int) -> Path:
    data = root / f"corpus-{docs}"
    if data.exists():
        return data
    data.mkdir(parents=True)
    rng = random.Random(docs)
    per = docs // FILES
    for k in range(FILES):
        with open(data / f"part-{k}.jsonl", "w", encoding="utf-8") as fh:
            for i in range(per):
                text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(60, 400)))
                fh.write(json.dumps({"id": k * per + i, "text": text}) + "\n")
    return data


def make_tokenizer(root: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path = root / "tokenizer.json"
    if path.exists():
        return path
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    rng = random.Random(0)
    sample = (" ".join(rng.choice(_WORDS) for _ in range(200)) for _ in range(3000))
    trainer = trainers.BpeTrainer(vocab_size=16000, special_tokens=["<unk>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(sample, trainer)
    tok.save(str(path))
    return path


def _row(method: str, docs: int, m: Measurement, tokens: Optional[int], note: str = "") -> BenchRow:
    row = BenchRow(
        method, "tokenize", docs, m.wall_s, m.peak_rss_mb, ok=m.ok, note=note if m.ok else m.tail(3)
    )
    row.extra["tokens_per_s"] = tokens / m.wall_s if tokens and m.ok else None
    return row


def bench_size(root: Path, docs: int, tok: Path, j: str, has_megatron: bool) -> List[BenchRow]:
    data = make_corpus(root, docs)
    files = sorted(str(p) for p in data.glob("*.jsonl"))
    out = root / f"out-{docs}"
    rows: List[BenchRow] = []
    ours = run_measured(
        [*torchx_cmd(), "run", "-s", "local_cwd", "datapipes.tokenize", "--input", str(data), "--output",
         str(out / "ours"), "--tokenizer", str(tok), "--eos", "</s>", "-j", j, "--overwrite", "True"],
        cwd=REPO_ROOT,
    )  # fmt: skip
    tokens = json.loads((out / "ours/_SUCCESS").read_text())["tokens"] if ours.ok else None
    rows.append(_row(f"tokenize -j {j}", docs, ours, tokens, "Megatron .bin/.idx, verified, exactly once"))
    for method, procs in (("encode_batch", 1), ("encode_batch", 2), ("encode_batch_fast", 2)):
        (out / f"enc{procs}").mkdir(parents=True, exist_ok=True)
        m = run_measured(
            [sys.executable, "-c", _ENCODE, str(tok), str(out / f"enc{procs}"), str(procs), method, *files]
        )
        got = (m.last_json() or {}).get("tokens")
        note = "" if got == tokens or tokens is None else f"tokens {got} != ours {tokens}"
        rows.append(_row(f"{method} x{procs}", docs, m, got, note or ".npy per file"))
    kinds = ["documents", *(["megatron"] if has_megatron else [])]
    for kind in kinds:
        m = run_measured(
            [sys.executable, "-c", _DATATROVE, kind, str(data), str(tok), str(out / f"dt-{kind}")]
        )
        rows.append(_row(f"datatrove {kind} x2", docs, m, tokens, "2 tasks, 2 workers"))
    return rows


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="20000,100000,400000", help="corpus sizes in documents")
    p.add_argument("--j", default="1x2")
    p.add_argument("--workdir", default=None, help="where corpora and outputs go (default: a temp dir)")
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args(argv)
    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench-tokenize-"))
    root.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(root)
    try:
        import datatrove.pipeline.tokens.megatron_tokenizer  # noqa: F401

        has_megatron = True
    except ImportError:
        has_megatron = False
    floor = measure_ddp_job(args.j, workdir=root / "floor")
    results: Dict[int, List[BenchRow]] = {}
    for docs in (int(s) for s in args.sizes.split(",")):
        results[docs] = bench_size(root, docs, tok, args.j, has_megatron)
    print(f"\nlaunch floor (no-op dist.ddp -j {args.j}): {floor.wall_s:.2f} s")
    head = f"{'method':<26} {'docs':>8} {'wall s':>8} {'Mtokens/s':>10} {'peak RSS MB':>11}  note"
    print(head + "\n" + "-" * len(head))
    crossover = None
    for docs, rows in results.items():
        for r in rows:
            tps = r.extra.get("tokens_per_s")
            wall = f"{r.wall_s:.2f}" if r.ok and r.wall_s else "FAILED"
            rate = f"{tps / 1e6:.3f}" if tps else "-"
            rss = f"{r.peak_rss_mb:.0f}" if r.peak_rss_mb else "-"
            print(f"{r.method:<26} {docs:>8} {wall:>8} {rate:>10} {rss:>11}  {r.note}")
        by = {r.method: r for r in rows}
        ours, one = by[f"tokenize -j {args.j}"], by["encode_batch x1"]
        if (
            crossover is None
            and ours.ok
            and one.ok
            and ours.wall_s
            and one.wall_s
            and ours.wall_s < one.wall_s
        ):
            crossover = docs
    print(f"crossover (tokenize -j {args.j} faster than encode_batch x1): "
          f"{f'{crossover:,} documents' if crossover else 'not reached at these sizes'}")  # fmt: skip
    if args.json:
        payload = {
            "floor_s": floor.wall_s,
            "crossover_docs": crossover,
            "rows": [
                {"method": r.method, "docs": d, "wall_s": r.wall_s, "ok": r.ok, **r.extra}
                for d, rows in results.items()
                for r in rows
            ],  # fmt: skip
        }
        Path(args.json).write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
