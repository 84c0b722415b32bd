"""Sched: what runs where and when: the modes, their plans, the pool and the screens.

Empty on purpose: importing one module costs that module.
"""
