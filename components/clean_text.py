"""A component recipe to copy into your own workspace: clean a text corpus.

``torchx run -s local_cwd components/clean_text.py:clean_text --input 'data/*.jsonl' --output out/clean``

It is the ``transform`` component with this team's defaults baked in (the example
``clean`` function, skip-and-report bad records, two ranks); edit it like any TorchX
component (TorchX's customize-by-copying pattern).
"""

from typing import Optional

from torchx import specs

import torchx_datapipes.components as datapipes


def clean_text(
    input: str,
    output: str,
    fn: str = "examples/transforms.py:clean",
    j: str = "1x2",
    num_workers: int = 1,
    max_error_rate: float = 0.01,
    overwrite: str = "False",
    artifact_store: Optional[str] = None,
) -> specs.AppDef:
    """Normalise and tokenize a JSONL text corpus; bad records go to OUTPUT/_errors/.

    Args:
        input: input JSONL files (glob, comma separated, or directory)
        output: output directory
        fn: the cleaning function (file.py:fn or pkg.module:fn)
        j: {nnodes}x{nproc_per_node}
        num_workers: worker processes per rank
        max_error_rate: fail when more than this fraction of records is bad
        overwrite: replace a complete output: true/false (also 1/0, yes/no; a str, since TorchX would
            read a bool "yes" as False)
        artifact_store: where to upload the function (s3://... for clusters)
    """
    return datapipes.transform(
        fn=fn,
        input=input,
        output=output,
        j=j,
        num_workers=num_workers,
        on_error="skip",
        max_error_rate=max_error_rate,
        overwrite=overwrite,
        artifact_store=artifact_store,
        name="/clean_text",
    )
