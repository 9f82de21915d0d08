"""The memcg foreign-writeback model (pure Python; nothing here is compiled).

Three mechanisms for what a throttled memcg does about pages it dirtied in a block device's page cache:

* ``"owner-wb"`` - the kernel today: flush the whole owner writeback of that disk;
* ``"bdev-devt"`` - the v6 series: remember dev_t values, flush only those bdev mappings from a dedicated
  workqueue;
* ``"bdev-ref"`` - the reviewer's alternative: the same, holding a device reference while recorded.

Entry points: :class:`WritebackModel` (the model), :class:`ForeignFlushWorkqueue` (real worker threads),
:class:`SimulatedWorkqueue` (simulated time), :func:`run_experiment` (the v6 table), :func:`compare_churn`
(dev_t reuse vs delayed release), :func:`run_sensitivity` (where the table's effect holds and where it
vanishes).
"""
from __future__ import annotations

from .churn import CHURN_MECHANISMS, ChurnResult, ChurnScenario, compare_churn, run_churn
from .experiment import (BASELINE, METRICS, PATCHED, POSTED_TABLE, ExperimentResult, RunResult, Scenario,
                         run_experiment, run_once)
from .jiffies import (JIFFIES_MASK, MonotonicClock, SimulatedClock, WritebackTunables, initial_jiffies,
                      jiffies_add, jiffies_diff, msecs_to_jiffies, time_after, time_after_eq, time_before,
                      time_before_eq)
from .memcontrol import (EXPIRED, BdevSlot, ForeignBdevRecords, ForeignWbRecords, ForeignWbSlot, TrackOutcome,
                         WbCompletion)
from .model import (ENOENT, MECHANISMS, PAGE_SIZE, BlockDevice, DeviceTable, DirtyDomain, Disk, Inode, Memcg,
                    ModelStats, Throttle, Writeback, WritebackModel, WritebackWork, mkdev)
from .sensitivity import (FOREGROUND_GAIN_PERCENT, HOLDS_PERCENT, QUICK_SENSITIVITY, SENSITIVITY,
                          VANISHES_PERCENT, Perturbation, SensitivityResult, run_sensitivity, summary_text, verdict)
from .simulation import (BufferedOverwriter, CgroupWorkload, DeviceModel, DirectWriter, Simulation,
                         share_bandwidth)
from .workqueue import (ForeignFlushWorkqueue, IOStream, SimulatedWorkqueue, WorkItem, WorkqueueStats,
                        WorkState, WriteRequest)

__all__ = [
    # model
    "WritebackModel", "Disk", "BlockDevice", "DeviceTable", "Inode", "Memcg", "Writeback", "WritebackWork",
    "DirtyDomain", "Throttle", "ModelStats", "MECHANISMS", "PAGE_SIZE", "ENOENT", "mkdev",
    # foreign records
    "ForeignWbRecords", "ForeignWbSlot", "ForeignBdevRecords", "BdevSlot", "WbCompletion", "TrackOutcome",
    "EXPIRED",
    # workqueues
    "ForeignFlushWorkqueue", "SimulatedWorkqueue", "WorkItem", "WorkState", "WriteRequest", "IOStream",
    "WorkqueueStats",
    # time
    "WritebackTunables", "SimulatedClock", "MonotonicClock", "JIFFIES_MASK", "time_after", "time_before",
    "time_after_eq", "time_before_eq", "jiffies_add", "jiffies_diff", "msecs_to_jiffies", "initial_jiffies",
    # simulation and experiments
    "Simulation", "DeviceModel", "DirectWriter", "BufferedOverwriter", "CgroupWorkload", "share_bandwidth",
    "Scenario", "RunResult", "ExperimentResult", "run_once", "run_experiment", "POSTED_TABLE", "METRICS",
    "BASELINE", "PATCHED",
    "ChurnScenario", "ChurnResult", "run_churn", "compare_churn", "CHURN_MECHANISMS",
    "Perturbation", "SENSITIVITY", "QUICK_SENSITIVITY", "HOLDS_PERCENT", "VANISHES_PERCENT", "SensitivityResult",
    "FOREGROUND_GAIN_PERCENT", "run_sensitivity", "verdict", "summary_text",
]
