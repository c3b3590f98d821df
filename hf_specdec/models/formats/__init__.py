"""Published drafter layouts, one module each: a reader (registered with `registry.register_format`, so the base it
maps onto reads such checkpoints in `from_pretrained`) and a writer (our drafters in that layout, for the serving
engines that read it). Importing this package registers every reader.

Formats map onto bases and heads; they never go into a base's modeling files."""

from . import dflash  # noqa: F401  (registers its reader)
