"""The generators of the documentation's generated parts, each from its one source: the paper page from the
bench's committed results (``paper_page``), the decision table from its measured rows (``decision_table``),
the settings tables from ``roseood.settings`` (``settings_table``), the bad-input table from the test's
cases (``bad_input_table``). ``tests/test_docs.py`` and the bad-input tests check that the pages hold what
they render; each module's docstring names the command that rewrites its part."""
