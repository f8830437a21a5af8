"""Helpers shared by the test suites and the benchmarks, imported as ``tests.support.<module>``.

``broker_process`` runs the real broker as a child process; ``wire`` is a raw remoting client; the other modules
set up clusters, controllers, certificates and scenarios for the suites that need them. Fixtures stay in the
conftest.py files; everything here is plain importable code.
"""
