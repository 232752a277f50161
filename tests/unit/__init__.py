"""The fast unit tests: one test module per product module, named after it (see test_layout.py)."""
