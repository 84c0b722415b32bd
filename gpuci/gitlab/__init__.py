"""GitLab: the notes API, and the merge-request note created once and updated in place."""
