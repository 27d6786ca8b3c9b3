"""Understanding: one chat message becomes a plan through small, strictly-schemed,
verified model tasks, bounded per turn and failing closed (DESIGN.md, decision record 3).

Start with :class:`Understander` and a :class:`Catalog`; see ``runner`` for the flow,
``tasks`` for the task kinds, ``budget`` for the bounds, ``replay`` for the log.
"""

from boundctx.understanding.budget import Bounds, Budget, BudgetReport
from boundctx.understanding.catalog import Catalog, Operation, Param, Record, Workflow, check_records
from boundctx.understanding.replay import Attempt, ReplayLog, ReplayProvider, read_attempts, read_log
from boundctx.understanding.runner import (
    Act,
    Click,
    Notice,
    Plan,
    Question,
    TaskConfig,
    Understander,
    is_held,
    replay_turn,
)
from boundctx.understanding.tasks import TASK_KINDS, Unit

__all__ = ["TASK_KINDS", "Act", "Attempt", "Bounds", "Budget", "BudgetReport", "Catalog", "Click", "Notice",
           "Operation", "Param", "Plan", "Question", "Record", "ReplayLog", "ReplayProvider", "TaskConfig", "Understander",
           "Unit", "Workflow", "check_records", "is_held", "read_attempts", "read_log", "replay_turn"]
