"""The terminal every `tessera` command prints to, and its one way of showing an error."""

from rich.console import Console
from rich.text import Text

console = Console()


def print_error(error, prefix="error: "):
    """An error in its own words, no Python traceback."""
    # Text, not markup: messages hold "[...]" (lists, shapes, TOML tables such as
    # [tenants.a]) that rich's markup would silently eat.
    console.print(Text.assemble((prefix, "red"), str(error)))
