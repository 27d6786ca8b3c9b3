"""Understanding: one chat message becomes a plan through small, strictly-schemed,
verified model tasks, bounded per turn and failing closed (DESIGN.md, decision record 3).

Start with :class:`Understander` and a :class:`Catalog`; see ``runner`` for the flow,
``plan`` for what a turn produces, ``attempts`` for how one task call is run to a
checked answer, ``tasks`` for the task kinds, ``budget`` for the bounds, ``replay`` for
the log.
"""

from boundctx.understanding.attempts import TaskConfig
from boundctx.understanding.budget import Bounds, Budget, BudgetReport
from boundctx.understanding.catalog import Catalog, Operation, Param, Record, Workflow, check_records
from boundctx.understanding.plan import Act, ActStatus, Click, Notice, NoticeKind, Plan, PlanStatus, Question, is_held
from boundctx.understanding.replay import Attempt, ReplayLog, ReplayProvider, read_attempts, read_log
from boundctx.understanding.runner import Understander, replay_turn
from boundctx.understanding.tasks import TASK_KINDS, TaskKind, Unit

__all__ = ["TASK_KINDS", "Act", "ActStatus", "Attempt", "Bounds", "Budget", "BudgetReport", "Catalog", "Click",
           "Notice", "NoticeKind", "Operation", "Param", "Plan", "PlanStatus", "Question", "Record", "ReplayLog",
           "ReplayProvider", "TaskConfig", "TaskKind", "Understander", "Unit", "Workflow", "check_records", "is_held",
           "read_attempts", "read_log", "replay_turn"]
