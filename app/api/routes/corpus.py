"""What corpus jobs found (GET /api/corpus ...): the head pages and Head roles' scatter read it."""

from collections.abc import Iterator
from pathlib import Path as PathLib
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool

from app.api.responses import errors
from app.api.strict_json import StrictJSONRoute
from app.deps import CorpusJobDep, SettingsDep
from atlas_engine.corpus.headvis_upload import MAX_UNZIPPED_FACTOR, import_upload
from atlas_engine.corpus.store import Store, open_or_set_aside, reading
from atlas_engine.errors import AtlasError
from atlas_engine.schemas.corpus import (
    CorpusHeads,
    CorpusRun,
    CorpusRuns,
    HeadDashboard,
    HeadVisHead,
)
from atlas_engine.services.corpus import (
    corpus_heads,
    corpus_runs,
    find_run,
    head_dashboard,
    open_store,
    run_fields,
)
from atlas_engine.services.headvis import headvis_head
from attention_core.head_stats import STATISTICS

router = APIRouter(prefix="/api/corpus", tags=["corpus"], route_class=StrictJSONRoute)
RunId = Annotated[int, Path(ge=1, le=2**31 - 1, description="A run's id from GET /api/corpus.")]
Index = Annotated[int, Path(ge=0, le=4096)]


def corpus_store(settings: SettingsDep) -> Iterator[Store | None]:
    """The store for this request (None where no job has written one), closed after it."""
    store = open_store(settings.corpus_store)
    try:
        yield store
    finally:
        if store is not None:
            store.close()


StoreDep = Annotated[Store | None, Depends(corpus_store)]
SET_ASIDE = (
    "The corpus store could not be read (not SQLite, or damaged): it was moved aside (code "
    "'store_unavailable', the detail says where to) and a new one starts empty; retry."
)


@router.get(
    "", response_model=CorpusRuns, summary="The corpus runs this server can read",
    responses=errors(429, 503, e503=SET_ASIDE),
)  # fmt: skip
def runs(settings: SettingsDep, store: StoreDep, job: CorpusJobDep) -> CorpusRuns:
    """Every run in the corpus store (`atlas corpus run` writes them, and the server's own
    background job where it runs one), with its progress."""
    with reading(store):
        return corpus_runs(store, settings.corpus_store, job.progress())


@router.get(
    "/{run_id}/heads",
    response_model=CorpusHeads,
    summary="Every head's statistics over a corpus",
    responses=errors(
        404, 422, 429, 503, e404="No run of that id; the detail lists the runs.", e503=SET_ASIDE
    ),
)
def heads(store: StoreDep, run_id: RunId) -> CorpusHeads:
    """Each statistic's mean and spread over the run's finished texts, per layer and head, and
    the roles the means pass: what the scatter and the head finder read. HeadVis's six metrics
    come beside them (named in `headvis`); a run imported from a HeadVis tree has only those."""
    with reading(store):
        return corpus_heads(store, run_id)


@router.get(
    "/{run_id}/heads/{layer}/{head}",
    response_model=HeadDashboard,
    summary="One head's dashboard over a corpus",
    responses=errors(
        404, 422, 429, 503, e404="No run of that id; the detail lists the runs.", e503=SET_ASIDE
    ),
)
def head(
    store: StoreDep,
    run_id: RunId,
    layer: Index,
    head: Index,
    metric: Annotated[
        str | None,
        Query(
            description=f"The statistic the texts are ranked by ({', '.join(STATISTICS)}); "
            "by default the one behind the head's strongest corpus role"
        ),
    ] = None,
    per_decile: Annotated[int, Query(ge=1, le=10, description="Texts shown a decile")] = 2,
) -> HeadDashboard:
    """Histograms of every statistic over the texts, the texts by decile of `metric`, the
    tokens it reads most and that read most sharply, and its distance histogram."""
    with reading(store):
        return head_dashboard(store, run_id, layer, head, metric, per_decile)


@router.get(
    "/{run_id}/heads/{layer}/{head}/headvis",
    response_model=HeadVisHead,
    summary="One head over a corpus as HeadVis shows it",
    responses=errors(
        404, 422, 429, 503, e404="No run of that id; the detail lists the runs.", e503=SET_ASIDE
    ),
)
def head_headvis(store: StoreDep, run_id: RunId, layer: Index, head: Index) -> HeadVisHead:
    """HeadVis's six metrics of the head, its sampled sequences by interval of max_activation
    with their sparse top-k maps, its query-key distance histogram and top tokens over those
    samples, and the histogram of max_activation over every sequence: the head's file of the
    run's HeadVis tree (`atlas corpus export RUN --headvis DIR` writes the whole tree). At most
    (n_intervals - 1) · samples_per_interval + samples_per_top_interval sequences (22 at the
    job's defaults), each of at most the run's sequence length."""
    with reading(store):
        run = find_run(store, run_id)
        return headvis_head(store, run, layer, head, run_fields(run))


class NotAZip(AtlasError):
    status = 415
    code = "unsupported_media_type"


@router.post(
    "/import",
    response_model=CorpusRun,
    status_code=201,
    summary="Import a HeadVis data tree (a zip)",
    responses=errors(
        400, 408, 413, 415, 422, 429, 503,
        e413="The zip is larger than the server's ATLAS_MAX_IMPORT_BYTES (64 MiB unless set; "
        "0 turns uploads off): `atlas corpus import DIR` takes any size.",
        e415="The body was not sent as `Content-Type: application/zip`.",
        e422="Not a zip, or a tree that breaks the HeadVis format: the detail names the file "
        "and the field. Nothing is stored.",
        e503="Another tree is being imported (Retry-After), or the store could not be read.",
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "A zip of a HeadVis tree's folder (config.json, scatter_data.json, "
            "heads/...), as Neuronpedia exports them; the folder may sit inside the zip. At most "
            f"ATLAS_MAX_IMPORT_BYTES, unzipped at most {MAX_UNZIPPED_FACTOR} times that.",
            "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)  # fmt: skip
async def import_tree_zip(request: Request, settings: SettingsDep) -> CorpusRun:
    """Store a HeadVis tree as a corpus run of its own, in one transaction: its head pages, the
    scatter and the head finder open with HeadVis's numbers, with or without the model on this
    server. An earlier import of the same model, dataset and sequence length is replaced."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("application/zip", "application/x-zip-compressed"):
        raise NotAZip(f"send the tree as a zip with Content-Type: application/zip; got {kind!r}")
    body = await request.body()  # the body guard has bounded it (ATLAS_MAX_IMPORT_BYTES)
    return await run_in_threadpool(_import_zip, settings.corpus_store, body,
                                   settings.max_import_bytes)  # fmt: skip


def _import_zip(store_path: str, body: bytes, max_import_bytes: int) -> CorpusRun:
    store = open_or_set_aside(PathLib(store_path))
    try:
        with reading(store):
            return run_fields(import_upload(store, body, max_import_bytes))
    finally:
        store.close()
