"""Reading PDFs: inspect with pdfium and pypdf, render pages in worker processes, pull text."""
