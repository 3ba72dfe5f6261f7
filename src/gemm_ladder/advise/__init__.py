"""Where a kernel stands on the ladder, its next step or the stop, and each level's acceptance criteria."""
