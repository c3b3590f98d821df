"""What a usable draft vocabulary is: the target token ids a drafter's head scores (`draft_vocab`), a non-empty 1-D
integer tensor of ids inside the vocabulary, as many as the config's `draft_vocab_size`. Checked where one comes in
(`set_draft_vocab`, a checkpoint's tensor, an adapter folder's draft_vocab.safetensors), so a bad one is refused
there instead of failing as an IndexError inside `generate()`."""

from __future__ import annotations

import torch


def vocab_bound(config) -> int | None:
    """How many ids a draft vocabulary may reach: the smaller of the drafter's and the target's vocabulary (each
    when the config knows it); None when it knows neither."""
    sizes = [getattr(config, name, None) for name in ("vocab_size", "target_vocab_size")]
    sizes = [s for s in sizes if isinstance(s, int)]
    return min(sizes) if sizes else None


def draft_vocab_problem(ids: object, size: int | None = None, vocab: int | None = None) -> str | None:
    """What makes `ids` unusable as a draft vocabulary of `size` ids (None: any size) inside a vocabulary of `vocab`
    ids (None: unbounded); None when it is usable."""
    if not isinstance(ids, torch.Tensor):
        return f"it is a {type(ids).__name__}, not a tensor of token ids"
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        return f"it is a {ids.dtype} tensor, not integer token ids"
    if ids.dim() != 1:
        return f"it has shape {tuple(ids.shape)}, not one row of token ids"
    if len(ids) == 0:
        return "it is empty"
    if size is not None and len(ids) != size:
        return f"it holds {len(ids)} ids, not the {size} its config's draft_vocab_size says"
    if int(ids.min()) < 0:
        return f"it holds negative ids (smallest {int(ids.min())})"
    if vocab is not None and int(ids.max()) >= vocab:
        return f"it holds ids up to {int(ids.max())}, outside the target's vocabulary of {vocab}"
    return None


def checked_draft_vocab(token_ids: object, vocab: int | None) -> torch.LongTensor:
    """`token_ids` as `set_draft_vocab` keeps them (sorted, each once, int64); ValueError saying what is wrong."""
    ids = token_ids
    if not isinstance(ids, torch.Tensor):
        try:
            ids = torch.as_tensor(ids)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"set_draft_vocab takes token ids (a 1-D tensor or list of ints), got {ids!r}") from err
    problem = draft_vocab_problem(ids, vocab=vocab)
    if problem:
        bound = f" in 0..{vocab - 1}" if vocab is not None else ""
        raise ValueError(
            f"set_draft_vocab cannot use these token ids: {problem}. Pass a non-empty 1-D tensor (or list) of integer "
            f"target token ids{bound}, e.g. the most frequent tokens of the target's output."
        )
    return ids.long().unique()  # sorted


__all__ = ["checked_draft_vocab", "draft_vocab_problem", "vocab_bound"]
