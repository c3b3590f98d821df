"""Publishing drafters to the Hugging Face Hub: model card rendering and one-call upload.

`publish_drafter(folder, repo_id)` and a drafter's `push_to_hub(repo_id)` take one path (`push.py`): importing this
package gives the drafter classes that `push_to_hub`.
"""

from .adapter_card import write_adapter_card
from .card import render_card
from .publish import publish_drafter
from .push import PublishMixin, install_push_to_hub

install_push_to_hub()

__all__ = ["PublishMixin", "publish_drafter", "render_card", "write_adapter_card"]
