"""The ``adaptive-gates`` command (``main``, the console script's entry point).

``command`` holds the parser and the entry point; ``evaluate``, ``fit``, ``collect`` and
``seakr`` one subcommand each (its arguments and its run); ``arguments`` and ``files``
the checked argument types; ``gate_options`` and ``backends`` the gate, models and
retrievers the command line describes; ``saved_gates`` the saved gate ``eval`` scores
as it is.
"""

from .command import build_parser, main

__all__ = ["build_parser", "main"]
