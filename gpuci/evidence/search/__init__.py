"""What the culprit and provider searches share: a search's step and record, its waves, the
halvings (by files first, checked where refuted), the hints, and a round's searches in waves."""
