"""Node-local mitigation decisions (DESIGN §7): pure functions the agent's enforcer and the
simulator both call. Nothing here writes a cgroup file or signals a process."""

from kalena_engine.mitigation.eviction import (
    EvictionPlan, NodeWorkloads, PressureSignal, Victim, plan_evictions,
)
from kalena_engine.mitigation.throttle import CpuShare, batch_cpu_budget_mcpu, batch_cpu_shares

__all__ = [
    "CpuShare", "EvictionPlan", "NodeWorkloads", "PressureSignal", "Victim",
    "batch_cpu_budget_mcpu", "batch_cpu_shares", "plan_evictions",
]
