"""Former home of the command-line helpers, now :mod:`pybcache.commands._util`; re-exported so that imports
written before the move keep working. New code imports ``pybcache.commands._util``."""
from __future__ import annotations

from .commands._util import (UsageError, add_tracking_arguments, emit_json, float_arg, format_bytes, format_table,
                             int_arg, parse_choice_list, parse_size, parse_size_list, progress, status_bar)

__all__ = ["UsageError", "add_tracking_arguments", "int_arg", "float_arg", "parse_size", "parse_size_list",
           "parse_choice_list", "emit_json", "progress", "status_bar", "format_bytes", "format_table"]
