"""Verdict: the modes' results and the evidence diffed into `verdict.json`."""
