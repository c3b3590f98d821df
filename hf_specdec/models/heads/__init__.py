"""Heads a drafter base can carry, one folder each (config, module, proposals, policy); `models/attach.py` puts one
on any base. Importing this package registers them."""

from . import dblast, dcoco  # noqa: F401  (each registers its head)
