"""An auth manager for the UI tests: Airflow's simple auth manager, plus the one role it cannot
express, a user who may read a DAG but not its runs (every user whose name starts with
``dagonly``; the simple auth manager ignores ``access_entity``). The api-server loads it with
``AIRFLOW__CORE__AUTH_MANAGER=support.run_blind_auth.RunBlindAuthManager``; login, tokens and
every other decision are the simple auth manager's own."""

from __future__ import annotations

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

BLIND_PREFIX = "dagonly"


class RunBlindAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
        if access_entity is not None and user.get_name().startswith(BLIND_PREFIX):
            return False  # the DAG itself, yes; its runs, tasks, logs, XComs: no
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
