"""Files, whatever the format: fsspec helpers, input byte streams, committed parts and their
checksums, the output layout, lease and ownership, and the job manifest (``_SUCCESS``) with the
per-unit commit records. Record formats live in :mod:`torchx_datapipes.formats`."""
