"""Run: the modes of a check, split by job into subpackages, in the order they import.

`disk`: what a run leaves on disk and reads back (OUT, the user's side outputs, the
durations file, an interrupted run); `proc`: one interpreter, started, watched and read
back; `sched`: what runs where and when (the modes, their plans, the pool, the screens).

Empty on purpose: the child side imports modules of `proc` (`gpuci.run.proc.waits`,
`gpuci.run.proc.ids`), and every package's `__init__` on the way runs first.
"""
