"""Parts of ``benchmarks/bench_reader.py``: the data sets and their copies (:mod:`.data`), the
readers compared (:mod:`.readers`) and the DataLoader measurement loop (:mod:`.measure`)."""
