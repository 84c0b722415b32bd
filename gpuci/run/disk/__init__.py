"""Disk: what a run leaves on disk and reads back, starting no interpreter.

The secrets masked in what gpuci writes (`masking`), OUT's lock and the check's run id
(`outdir`), the user's --junitxml, --cov and cache kept the plain run's (`side_outputs`),
the durations file a later check orders by (`durations`), and an interrupted results
directory continued (`resume`).

Empty on purpose: importing one module costs that module.
"""
