"""The automations the `make ui` stack adds beside `prefect deploy` (whose deployment triggers make their own):
the zombie-run automation from Prefect's guide ("Detect zombie flows"). A flow run started by a worker emits
``prefect.flow-run.heartbeat`` every ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (the stack sets 30); one that
has beaten and then goes silent for ``ZOMBIE_AFTER_S`` without finishing (its machine died, its worker and its
process were killed) is set ``Crashed``. The ``crashed`` deployment's trigger then marks its MLflow run KILLED.

``python -m deployments.automations`` (with ``PREFECT_API_URL`` set) creates them, replacing older copies.
"""

from __future__ import annotations

import sys
from datetime import timedelta

from tasks.core.runs import FLOW_HEARTBEAT_S

HEARTBEAT_S = FLOW_HEARTBEAT_S  # PREFECT_FLOWS_HEARTBEAT_FREQUENCY for the stack's worker and CLI runs
ZOMBIE_AFTER_S = 90  # three missed beats
ZOMBIE = "faultline: crash zombie flow runs"


def zombie_automation():
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.events.schemas.events import ResourceSpecification

    return Automation(
        name=ZOMBIE,
        description=f"A flow run that sent heartbeats and then none for {ZOMBIE_AFTER_S} s without finishing is "
        "marked Crashed (its MLflow run is then marked KILLED by the `crashed` deployment's trigger).",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={
                "prefect.flow-run.heartbeat",
                "prefect.flow-run.Completed",
                "prefect.flow-run.Failed",
                "prefect.flow-run.Cancelled",
                "prefect.flow-run.Crashed",
            },
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=ZOMBIE_AFTER_S),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"no heartbeat for {ZOMBIE_AFTER_S} s: marked Crashed by the zombie-run automation",
            )
        ],
    )


def ensure() -> str:
    """Create the automations, deleting earlier ones of the same name (``make ui`` reuses its server's database)."""
    from prefect.automations import Automation

    while True:
        try:
            Automation.read(name=ZOMBIE).delete()
        except ValueError:  # none (left) of that name
            break
    return str(zombie_automation().create().id)


if __name__ == "__main__":
    print(ensure())
    sys.exit(0)
