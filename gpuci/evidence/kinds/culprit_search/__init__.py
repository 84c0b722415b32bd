"""The culprit search, a kind of evidence: which earlier test, provider or co-running file
a victim's finding turns on (its kind as the engine lists it: `kind`)."""
