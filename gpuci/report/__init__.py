"""Report: `verdict.json` told as a terminal summary, an HTML report and an MR comment."""
