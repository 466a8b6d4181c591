"""The work app's models, defined beside the code that writes them, gathered where Django
looks for them."""

from work.watch_models import Watch

__all__ = ["Watch"]
