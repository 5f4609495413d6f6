"""The vision-language model's contract: one profile per model (prompt, image rule,
sampling, serve flags), the chat request we send for a page, and a parser per reply
format, with the layout blocks of the models that give them."""
