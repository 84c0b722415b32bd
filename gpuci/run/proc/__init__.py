"""Proc: one interpreter, a fresh `python -m pytest`, from its start to what it did.

Started (`spawn`, `launch`, `held`), watched (`supervisor`, `reaper`, `ledger`, `gpumem`,
`holders`, `logs`) and read back (`journal`, `endings`, `attempts`), with the child side's
own modules (`waits`, `ids`) and collection (`discover`).

Empty on purpose: every test interpreter imports `gpuci.run.proc.waits` and
`gpuci.run.proc.ids`, and this `__init__` runs first.
"""
