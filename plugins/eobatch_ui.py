"""The ledger page's Airflow plugin for a checkout, whose ``plugins/`` is Airflow's plugins folder
(the plugin manager imports this file; ``.airflowignore`` keeps the ``eobatch`` package out of its
walk). An installed eobatch registers the same class through the wheel's ``airflow.plugins``
entry point instead.
"""

from eobatch.ui.plugin import EobatchLedgerPlugin

__all__ = ["EobatchLedgerPlugin"]
