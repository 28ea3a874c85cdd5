"""What the server (app/) and the library (attention_atlas/) share, below both: model loading
and the capture path (`models/`), forward passes, tokens and replay (`inference/`), the
services that compute each view's answer and the schemas of their requests, the corpus job,
settings, errors a client can act on, the compute lanes, serialisation and the binary maps
format. It imports attention_core and nothing of the server or the library, so both import it
and neither imports the other's modules.

The server runs PyTorch on threads with different intra-op thread counts (compute.py: the
heavy lane one a core, the quick lane one), and a map must be the same bits whichever lane made
it: a replayed head equal to the model's own. Intel MKL's matrix products split their sums by
thread count on some CPUs (seen on an AVX-512 Xeon: a (13, 576) x (576, 1536) product differed by
5e-5 between one and two threads, and SmolLM2's maps by 2e-6), unless its conditional numerical
reproducibility is strict. MKL reads MKL_CBWR at its first product, so it is set here, before
any module of the server or the library imports torch; an operator's own value is kept.
Measured beside the default: forward passes of MiniLM and SmolLM2 at 16 to 512 tokens took the
same time within this machine's noise (docs/performance.md).

Nothing else happens on import: `atlas_engine.formats` needs numpy alone (AtlasClient reads
answers without torch).
"""

import os

os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
