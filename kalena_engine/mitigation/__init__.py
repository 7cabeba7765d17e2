"""Node-local mitigation decisions (docs/design.md §7): pure functions the agent's enforcer and the
simulator both call. Nothing here writes a cgroup file or signals a process."""

from kalena_engine.mitigation.cpu import (
    CpuThrottlePlan,
    ServiceCap,
    StarvationPlan,
    plan_batch_cpu,
    plan_starvation_relief,
    service_cpu_claims_mcpu,
    throttled_window_ratio,
)
from kalena_engine.mitigation.eviction import (
    EvictionPlan,
    LedgerFreshness,
    NodeWorkloads,
    PressureSignal,
    Victim,
    ledger_freshness,
    plan_evictions,
    unaccounted_usage,
)
from kalena_engine.mitigation.memory import MemoryCap, batch_memory_cap
from kalena_engine.mitigation.throttle import CpuShare, batch_cpu_budget_mcpu, batch_cpu_shares

__all__ = [
    "CpuShare", "CpuThrottlePlan", "EvictionPlan", "LedgerFreshness", "MemoryCap", "NodeWorkloads", "PressureSignal",
    "ServiceCap", "StarvationPlan", "Victim", "batch_cpu_budget_mcpu", "batch_cpu_shares",
    "batch_memory_cap", "ledger_freshness", "plan_batch_cpu", "plan_evictions", "plan_starvation_relief", "unaccounted_usage",
    "service_cpu_claims_mcpu", "throttled_window_ratio",
]
