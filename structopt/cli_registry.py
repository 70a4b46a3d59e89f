"""The command line's one task registry: every task by name, as the parser, ``train`` and ``predict`` read it.

The built-in tasks are declared in :mod:`structopt.cli_tasks`, the own-data kinds (which subclass those specs)
in :mod:`structopt.cli_own`; this module joins them, so neither of the two imports the other's registry.
"""

from __future__ import annotations

from structopt.cli_own import OWN_SPECS
from structopt.cli_tasks import BUILTIN_TASKS, TaskSpec
from structopt.registry import Registry

#: every task, by name: the built-in tasks (``@builtin_task``), then the own-data kinds; a name given twice is
#: refused
TASKS: Registry[TaskSpec] = Registry("task")
for _name, _spec in [*BUILTIN_TASKS.items(), *OWN_SPECS.items()]:
    TASKS.add(_name, _spec)

__all__ = ["TASKS"]
