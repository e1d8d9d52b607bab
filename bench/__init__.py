"""The project's laboratory: benchmarks, A/B harness, sweeps, the accuracy ablation and the peer
runner. Not installed with the package; run from the checkout as ``python -m bench COMMAND``
(``python -m bench --help`` lists the commands). ``bench/results/`` holds the current result of
each benchmark; ``docs/performance.md`` and ``docs/accuracy.md`` say what they show and how to
reproduce them."""
