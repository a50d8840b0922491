"""The core suite's helpers: fixtures, test servers and checks shared by its test modules
and by the framework packages' suites (imported as ``support.<name>``; ``tests/`` is on
pytest's ``pythonpath``)."""
