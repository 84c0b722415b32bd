"""Evidence: after the screens, the strict runs that decide a suspect's category.

Empty on purpose: every test interpreter imports `gpuci.evidence.poison` (through
`gpuci.pytest_plugin`), and a package's `__init__` runs first.
"""
