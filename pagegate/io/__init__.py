"""Where PDFs come from and results go: one store over S3 and local paths, source listings,
ranged reads, and a bounded pool for blocking reads."""
