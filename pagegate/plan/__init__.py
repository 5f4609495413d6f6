"""Planning a run: count pages, cut stable groups, and keep only what is not done yet."""
