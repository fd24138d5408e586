"""Framework-overhead benchmark: runstream against a bare asyncio async-generator pipeline.

Workloads and targets follow ``bench.md`` (W1-W4). Run with ``python -m bench``.
"""
