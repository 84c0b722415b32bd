"""Run: starting and watching interpreters, one mode's schedule, the screens.

Empty on purpose: the child side imports a module of a package (the fork server runs
`python -m gpuci.run.preimport`), and a package's `__init__` runs first.
"""
