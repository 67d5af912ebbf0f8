"""Record formats, one package or module per format (``csv/``, ``jsonl/``, ``parquet/``,
``webdataset/``, ``json.py``, ``text.py``, ``files.py``), each declared by a
:class:`~torchx_datapipes.formats.format.Format` in one table (:mod:`.registry`) that every
consumer asks: option checks, help, planning (:mod:`.planning`, :mod:`.extensions`), reading a
unit (:mod:`.reading`), writing parts (:mod:`.writing`) and reading them back (:mod:`.chunks`)."""
