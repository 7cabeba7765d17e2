"""Roles (DESIGN §12): Django groups holding Kalena's permissions.

``viewer`` reads everything; ``operator`` also submits and deletes batch (and tunes policy);
``approver`` also approves or rejects re-plan recommendations. Any logged-in user can view.
The groups are created by the migration ``api/0002_roles`` (which keeps its own frozen copy).
"""

from __future__ import annotations

ROLES: dict[str, tuple[str, ...]] = {
    "viewer": (),
    "operator": ("scheduling.operate_batch",),
    "approver": ("scheduling.operate_batch", "replan.approve_replan"),
}

