"""Roles (docs/design.md §12): Django groups holding Kalena's permissions.

``viewer`` reads everything; ``operator`` also submits, completes and deletes batch,
creates and revokes agent tokens and tunes policy (``policy/0002``); ``approver`` also approves or rejects re-plan
recommendations. Any logged-in user can view. The groups are created by the migrations
``api/0002_roles`` and ``telemetry/0003_operator_manages_agent_tokens`` (which keep their own
frozen copies); a test checks that the database holds exactly this table.
"""

from __future__ import annotations

ROLES: dict[str, tuple[str, ...]] = {
    "viewer": (),
    "operator": ("scheduling.operate_batch", "telemetry.manage_agent_tokens", "policy.tune_policy"),
    "approver": ("scheduling.operate_batch", "telemetry.manage_agent_tokens", "replan.approve_replan",
                 "policy.tune_policy"),
}

