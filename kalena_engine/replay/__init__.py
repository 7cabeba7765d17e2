"""Deterministic replay of a Kuberina blueprint with real usage and real batch arrivals."""

from kalena_engine.replay.scheduling import ReplayScheduler
from kalena_engine.replay.setup import NODE_SETS, Replay, ReplayConfig, ReplayInputs, build_replay
from kalena_engine.replay.simulator import BatchEvent, SimClock, Simulator, StepRecord
from kalena_engine.replay.usage import MAPPINGS

__all__ = [
    "MAPPINGS", "NODE_SETS", "BatchEvent", "Replay", "ReplayConfig", "ReplayInputs", "ReplayScheduler", "SimClock",
    "Simulator", "StepRecord", "build_replay",
]
