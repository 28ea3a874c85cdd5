"""`atlas`: the command line. `atlas serve --model /path/to/checkpoint` starts the app with that
folder (or Hub id) allowed and loaded, so a fine-tuned checkpoint needs no settings file.
`atlas corpus run` describes every head of a model over a corpus, into the store the head
pages read (resumable: run it again after a stop or a crash).

    atlas serve --model ./my-finetuned-bert --model gpt2 --port 8000
    atlas serve --model ./my-llama --device cuda --dtype bfloat16
    atlas corpus run --model HuggingFaceTB/SmolLM2-135M-Instruct --corpus python-docs
    atlas corpus run --model ./my-llama --corpus ./my-texts.jsonl --texts 2000 --tokens 512
    atlas corpus list
    atlas corpus export 2 --headvis ./trees/smollm2        (a HeadVis data tree of run 2)
    atlas corpus import ./gemma-3-1b/headvis/monology-pile-uncopyrighted
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
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
    """`atlas serve`: sets the server's ATLAS_* settings from `args`, prints each model's
    address, and becomes the server (`python -m app`, exec'd), so it does not return."""
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
    for model_id, _ in entries:
        print(f"Attention Atlas: {model_id} at http://{args.host}:{args.port}/?model={model_id}")
    sys.stdout.flush()
    # The server as `make run` starts it, in this process (its settings are the environment
    # set above): the library imports none of the server's code.
    options = ["--host", args.host, "--port", str(args.port), "--log-level", args.log_level]
    os.execv(sys.executable, [sys.executable, *SERVER_MODULE, *options])


SERVER_MODULE = (
    ["-P", "-m", "app"]
    if sys.version_info >= (3, 11)
    else ["-c", "import runpy, sys; sys.path.pop(0); runpy.run_module('app', run_name='__main__')"]
)
"""`python -m app`, without the working directory at the front of sys.path (-P): a project of
the user's own with an `app` package or app.py must not be what `atlas serve` starts."""


PROGRESS_SECONDS = 10.0


def corpus(args: argparse.Namespace) -> None:
    """`atlas corpus run` and `atlas corpus list`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name in ("device", "dtype"):
        if getattr(args, name, None) is not None:
            os.environ[f"ATLAS_{name.upper()}"] = getattr(args, name)
    from atlas_engine.corpus.store import Store

    store = Store(Path(args.store))
    if args.action == "list":
        for run in store.runs():
            print(f"{run.id}: {run.model} on {run.corpus}, {run.sequence_tokens} tokens a text, "
                  f"{run.done} of {run.planned} texts done")  # fmt: skip
        return
    if args.action in ("export", "import"):
        headvis_tree(args, store)
        return
    model_id, entry = args.model
    finished = store.run_for(model_id, args.corpus, args.tokens)
    if finished is not None and finished.done == finished.planned:  # nothing to load the model for
        print(f"run {finished.id}: {model_id} on {args.corpus}: all {finished.planned} texts done")
        return
    if entry != model_id:
        extra = json.loads(os.environ.get("ATLAS_EXTRA_MODELS", "[]"))
        os.environ["ATLAS_EXTRA_MODELS"] = json.dumps([*extra, entry])
    from atlas_engine.config import Settings
    from atlas_engine.corpus.background import duration
    from atlas_engine.corpus.job import plan, run_job
    from atlas_engine.corpus.texts import CorpusMissing
    from atlas_engine.models.manager import ModelManager

    settings = Settings(preload=[])
    loaded = ModelManager.from_settings(settings, max_loaded=1).get(model_id)
    try:
        run = plan(store, loaded, args.corpus, args.tokens, args.texts)
    except (CorpusMissing, ValueError) as err:
        raise SystemExit(f"atlas corpus: {err}") from None
    print(f"run {run.id}: {model_id} on {args.corpus}: {run.done} of {run.planned} texts done")

    started, printed = run.done, [time.monotonic()]
    tokens_a_text = args.tokens  # an upper bound until the first texts are done

    def progress(done: int, planned: int, rate: float) -> None:
        """One line a step (a log file keeps each), at most every PROGRESS_SECONDS and last."""
        if done < planned and time.monotonic() - printed[0] < PROGRESS_SECONDS:
            return
        printed[0] = time.monotonic()
        left = (planned - done) * tokens_a_text / max(rate, 1e-9)
        end = "" if done == planned else f", about {duration(left)} left"
        print(f"{done} of {planned} texts ({done - started} this run), {rate:,.0f} tokens/s{end}",
              flush=True)  # fmt: skip

    try:
        if args.cluster:
            from atlas_engine.corpus.cluster import connect, run_on_cluster

            with connect(args.cluster) as client:
                print(f"on {args.cluster}: {len(client.scheduler_info()['workers'])} workers")
                run = run_on_cluster(client, model_id, settings.extra_models, store, run,
                                     progress=progress)  # fmt: skip
        else:
            run = run_job(loaded, store, run, progress=progress)
    except KeyboardInterrupt:
        print("stopped: run it again to go on from here")
        return
    print(f"done: {run.done} of {run.planned} texts, stored in {args.store}")


def headvis_tree(args: argparse.Namespace, store) -> None:
    """`atlas corpus export RUN --headvis DIR` and `atlas corpus import DIR`."""
    from atlas_engine.corpus.headvis_tree import export_tree, import_tree, read_folder
    from atlas_engine.errors import AtlasError

    try:
        if args.action == "import":
            run = import_tree(store, read_folder(Path(args.target)))
            print(f"run {run.id}: {run.model} on {run.corpus.removeprefix('headvis:')} "
                  f"({run.layers} layers × {run.heads} heads, {run.planned} sequences), "
                  f"imported from {args.target}")  # fmt: skip
            return
        runs = {str(r.id): r for r in store.runs()}
        if args.target not in runs:
            known = ", ".join(f"{r.id} ({r.model})" for r in runs.values()) or "none"
            raise SystemExit(f"atlas corpus export: no run {args.target}; runs: {known}")
        run = runs[args.target]
        if run.done < run.planned:
            print(f"run {run.id} has {run.done} of {run.planned} texts done: the tree holds those")
        folder = export_tree(store, run, Path(args.headvis))
        print(f"run {run.id}: HeadVis tree of {run.model} written to {folder}")
    except AtlasError as err:
        raise SystemExit(f"atlas corpus {args.action}: {err.message}") from None


def main(argv: list[str] | None = None) -> None:
    """The `atlas` command on `argv` (sys.argv's by default). Returns nothing: `serve` becomes
    the server, `corpus` prints its progress; a wrong argument exits with argparse's status 2."""
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
    jobs = commands.add_parser("corpus", help="describe every head over a corpus")
    jobs.add_argument("action", choices=["run", "list", "export", "import"])
    jobs.add_argument("target", nargs="?", help="export: the run's id; import: the tree's folder")
    jobs.add_argument("--headvis", help="export: the folder to write the HeadVis tree into")
    jobs.add_argument("--model", type=model_entry, help="a model id or checkpoint folder")
    jobs.add_argument(
        "--corpus", default="python-docs",
        help="python-docs (Debian's python3-doc: `make corpus`), or a .txt/.jsonl file or folder",
    )  # fmt: skip
    jobs.add_argument("--texts", type=int, default=500, help="texts cut from the corpus at most")
    jobs.add_argument("--tokens", type=int, default=128, help="tokens a text at most")
    jobs.add_argument("--store", default="var/corpus.sqlite", help="the SQLite store")
    jobs.add_argument(
        "--cluster",
        help="run the texts on Dask: local:N (N worker processes here) or a scheduler's "
        "address (tcp://host:8786); needs `pip install attention-atlas[distributed]`",
    )
    jobs.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"])
    jobs.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args)
    elif args.command == "corpus":
        if args.action == "run" and args.model is None:
            parser.error("atlas corpus run needs --model")
        if args.action in ("export", "import") and args.target is None:
            what = "run id" if args.action == "export" else "folder"
            parser.error(f"atlas corpus {args.action} needs a {what}")
        if args.action == "export" and args.headvis is None:
            parser.error("atlas corpus export needs --headvis DIR (the folder to write)")
        corpus(args)


if __name__ == "__main__":
    main()
