"""Drafter bases and heads, one folder each, and what they share.

`registry.py` is the one table of bases and heads; importing this package registers the two bases
(`block_drafter`, `pard`), the two heads (`heads/dcoco`, `heads/dblast`) and the readers of published layouts
(`formats/`: each published layout, mapped onto the base that drafts as it does). `attach.py` puts any head on
any base, saves it alone and loads it back; `loading.py` loads any saved drafter (aliases of earlier saved formats
included); `auto_model.py` lets `AutoModel.from_pretrained` read the published layouts too; `aliases.py` keeps the
names a base with a head went by.
"""

from . import (  # noqa: F401  (each registers its base, heads or layouts)
    auto_model,
    block_drafter,
    formats,
    heads,
    loading,  # noqa: F401  (registers the saved formats' aliases)
    pard,
)

auto_model.install()
