"""pagegate: PDFs to clean text through a vision-language model on vLLM, behind an admission gate."""

__version__ = "0.1.0"
