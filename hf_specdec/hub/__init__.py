"""Publishing drafters to the Hugging Face Hub: model card rendering and one-call upload."""

from .adapter_card import write_adapter_card
from .card import render_card
from .publish import publish_drafter

__all__ = ["publish_drafter", "render_card", "write_adapter_card"]
