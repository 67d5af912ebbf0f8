"""A user transform packaged by torchx_datapipes 0.1.0 (artifact format 1)."""

import legacy_helper

from torchx_datapipes import batched


@batched
def legacy(xs: list[int]) -> list[int]:
    return [legacy_helper.shift(x) * 2 for x in xs]
