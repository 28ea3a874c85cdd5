"""Time to the phase change: the lab's default two-layer model against the one-layer contrast.

The phase change is the first snapshot (every 50 steps) at which a layer-1 head's induction
score passes attention_core.training.PHASE_CHANGE_SCORE (0.4). Training runs on one intra-op
thread, as on the server's quick lane. Prints the estimate of training_cost beside each run.

    .venv/bin/python -m bench.training_cost
"""

from __future__ import annotations

import torch

from attention_core.training import TrainConfig, train, training_cost

EVERY = 50


def run(config: TrainConfig) -> None:
    snapshots = []
    result = train(config, EVERY, snapshots.append)
    change = next((s for s in snapshots if s.phase_changed), None)
    cost = training_cost(config, EVERY)
    last = result.last
    when = (
        f"phase change at step {change.step}, {change.elapsed:.1f} s"
        if change
        else "no phase change"
    )
    print(
        f"{config.layers} layer(s): {when}; {last.step} steps in {last.elapsed:.1f} s "
        f"(estimate {cost.seconds:.1f} s, {cost.bytes / 2**20:.1f} MiB); "
        f"loss first {last.loss_first:.2f} second {last.loss_second:.2f}; "
        f"best induction score {float(last.induction.max()):.2f}, "
        f"best previous-token {float(last.previous_token[0].max()):.2f}"
    )


def main() -> None:
    torch.set_num_threads(1)
    run(TrainConfig())
    run(TrainConfig(layers=1))


if __name__ == "__main__":
    main()
