"""`atlas`: the command line. `atlas serve --model /path/to/checkpoint` starts the app with that
folder (or Hub id) allowed and loaded, so a fine-tuned checkpoint needs no settings file.

    atlas serve --model ./my-finetuned-bert --model gpt2 --port 8000
    atlas serve --model ./my-llama --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def model_entry(value: str) -> tuple[str, str]:
    """(model id, ATLAS_EXTRA_MODELS entry): a folder becomes 'local/<name>=<folder>'."""
    folder = Path(value).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise argparse.ArgumentTypeError(
                f"{value} has no config.json: point --model at a folder written by save_pretrained"
            )
        model_id = f"local/{folder.resolve().name}"
        return model_id, f"{model_id}={folder.resolve()}"
    if value.count("/") > 1 or value.startswith((".", "~")):
        raise argparse.ArgumentTypeError(f"{value} is neither a folder nor a Hub id (org/name)")
    return value, value


def serve(args: argparse.Namespace) -> None:
    entries = args.model  # [(model id, ATLAS_EXTRA_MODELS entry)], checked by argparse
    if entries:
        extra = json.loads(os.environ.get("ATLAS_EXTRA_MODELS", "[]"))
        os.environ["ATLAS_EXTRA_MODELS"] = json.dumps(extra + [entry for _, entry in entries])
        os.environ["ATLAS_PRELOAD"] = json.dumps([model_id for model_id, _ in entries])
    for name in ("device", "dtype"):
        if getattr(args, name) is not None:
            os.environ[f"ATLAS_{name.upper()}"] = getattr(args, name)
    if args.hub_downloads:
        os.environ["ATLAS_HUB_DOWNLOADS"] = "1"
    else:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from app.__main__ import main as serve_app  # reads the settings set above

    for model_id, _ in entries:
        print(f"Attention Atlas: {model_id} at http://{args.host}:{args.port}/?model={model_id}")
    serve_app(["--host", args.host, "--port", str(args.port), "--log-level", args.log_level])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="atlas", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="serve the web app and API")
    run.add_argument(
        "--model", action="append", default=[], type=model_entry,
        help="a checkpoint folder or Hub id to allow and load (repeat for more)",
    )  # fmt: skip
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, default=8000)
    run.add_argument("--log-level", default="info")
    run.add_argument(
        "--device", choices=["auto", "cpu", "cuda", "mps"], help="where models run (default auto)"
    )
    run.add_argument(
        "--dtype", choices=["float32", "bfloat16", "float16"], help="default float32 (exact)"
    )
    run.add_argument(
        "--hub-downloads", action="store_true", help="let Hub ids download (needs internet)"
    )
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args)


if __name__ == "__main__":
    main()
