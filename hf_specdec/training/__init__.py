"""Drafter training: config, data (target continuations and cached target features), packing, losses, trainer."""
