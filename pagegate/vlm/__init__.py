"""The vision-language model's contract: its profile (prompt, sampling), the chat request
we send for a page, and the reply format we accept."""
