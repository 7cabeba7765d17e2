"""The control plane sends each agent its cluster's current policy version over the link — after
the hello and again when a new version is saved — and records the version the agent reports
applying; the policy page lists agents behind (real consumer, writer and PostgreSQL)."""

from __future__ import annotations

import time

import pytest

from kalena_engine.policy_file import PolicyDocument
from kalena_engine.policy import Policy
from kalena_web.policy.selectors import agents_policy_state
from kalena_web.policy.services import policy_version_create
from kalena_web.telemetry.models import AgentStatus
from tests.web.telemetry.conftest import Agent, hello, record, require_postgres, run, samples

NODE = "thinkcentre-beta"


def _save(cluster, margin: float) -> int:
    document = PolicyDocument(policy=Policy().with_estimator(margin_ratio=margin))
    return policy_version_create(cluster=cluster, document=document, user="olga").version


def test_agent_gets_the_current_version_then_each_new_one_and_reports_it(agent_app, home, beta, beta_token) -> None:
    require_postgres()
    _save(home, 1.3)

    async def go():
        from channels.db import database_sync_to_async

        agent = Agent(agent_app, beta_token)
        assert await agent.connect()
        await agent.send({**hello(NODE), "policy_version": None})
        first = await agent.until("policy")
        await agent.send({**samples(NODE, 1, [record("database/postgres-0", time.time() - 1)]), "policy_version": 1})
        await agent.until("ack")
        state_after_first = await database_sync_to_async(agents_policy_state)(cluster=home)
        await database_sync_to_async(_save)(home, 1.4)
        pushed = await agent.until("policy", timeout=15.0)       # the token watch pushes it (check_s = 0.2 s)
        state_behind = await database_sync_to_async(agents_policy_state)(cluster=home)
        await agent.send({**samples(NODE, 2, [record("database/postgres-0", time.time() - 0.5)]), "policy_version": 2})
        await agent.until("ack")
        await agent.close()
        return first, pushed, state_after_first, state_behind

    first, pushed, (v1, agents1), (v2, agents2) = run(go())
    assert (first["version"], first["estimator"]["margin_ratio"]) == (1, 1.3)
    assert first["eviction"]["evict_threshold_ratio"] == 0.95           # the whole section is sent
    assert (v1, [(a.node, a.reported, a.behind) for a in agents1]) == (1, [(NODE, 1, False)])
    assert (pushed["version"], pushed["estimator"]["margin_ratio"]) == (2, 1.4)
    assert (v2, [(a.node, a.reported, a.behind) for a in agents2]) == (2, [(NODE, 1, True)])
    assert AgentStatus.objects.get(node=beta).policy_version == 2


def test_no_policy_message_while_the_cluster_runs_on_the_defaults(agent_app, home, beta, beta_token) -> None:
    require_postgres()

    async def go():
        agent = Agent(agent_app, beta_token)
        assert await agent.connect()
        await agent.send(hello(NODE))
        await agent.send(samples(NODE, 1, [record("database/postgres-0", time.time() - 1)]))
        reply = await agent.receive()
        await agent.close()
        return reply

    assert run(go())["type"] == "ack"
    assert AgentStatus.objects.get(node=beta).policy_version is None
