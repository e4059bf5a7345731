"""The `tessera` subcommands, one module per group; each adds its own parsers
(``add_commands(sub)``) and holds the functions they run. :mod:`tessera.cli` puts them in
order and dispatches."""
