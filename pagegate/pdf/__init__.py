"""Reading PDFs: validate and count pages, render a page to PNG, pull its text layer."""
