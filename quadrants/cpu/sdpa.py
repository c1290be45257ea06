"""Grouped key/value heads handed to torch's SDPA kernel on the CPU
(`train.cpu.sdpa_grouped_heads`).

transformers' SDPA attention repeats grouped key/value heads to the query heads whenever there is
a mask, because CUDA's fused kernels take no mask with grouped heads; torch's CPU flash kernel
does (`enable_gqa`). transformers' own switch, the environment variable
`TRANSFORMERS_SDPA_FORCE_GQA=1`, which it reads at every attention call
(transformers/integrations/sdpa_attention.py, `use_gqa_in_sdpa`), hands the grouped heads over as
they are: the result is the same to the bit, and the repeat and its backward (a sum over the
copies) are gone: 4.4 against 5.8 ms forward + backward per layer on the tiny workload's
[64, 4, 31, 64] queries (docs/performance.md). On CUDA the switch would send masked attention to
the slow math kernel, so only the CPU tuning sets it (quadrants/cpu/__init__.py); an explicit
setting of the variable is left alone.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

FORCE_GQA = "TRANSFORMERS_SDPA_FORCE_GQA"


def hand_grouped_heads_to_sdpa(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Set transformers' switch in `environ` unless it is set already; True when set here."""
    if FORCE_GQA in environ:
        return False
    environ[FORCE_GQA] = "1"
    return True
