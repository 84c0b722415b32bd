"""Run: starting and watching interpreters, one mode's schedule, the screens.

Empty on purpose: the child side imports a module of this package (`gpuci.run.waits`),
and a package's `__init__` runs first.
"""
