"""The culprit search, a kind of evidence: which earlier test or co-running file an
order-dependent victim's failure turns on (its kind as the engine lists it: `kind`)."""
