"""The batch ledger in the Airflow UI: a page and a JSON API per pipeline.

* ``page``: pure rendering (HTML and the inline SVG timeline) from ledger rows; no Airflow, no I/O.
* ``app``: the FastAPI app Airflow's api-server mounts at ``/eobatch`` (reads the ledger with
  ``eobatch.cli.ledger_rows``, the function behind `make ledger`; Airflow's own authentication).
* ``plugin``: the ``AirflowPlugin`` that registers the app and the "Ledger" tabs of the DAG and
  DAG-run pages (the wheel's ``airflow.plugins`` entry point; ``plugins/eobatch_ui.py`` in a
  checkout, whose ``plugins/`` is Airflow's plugins folder).

Nothing here imports pyspark.
"""
