"""The kinds of evidence: one module (or subpackage) a kind of question, and the engine, their
ordered list.

Empty on purpose, as every package of gpuci: importing one module costs that module.
"""
