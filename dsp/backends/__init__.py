"""Execution backends of `dsp.evaluate` beyond this process's threads.

`dsp.backends.ray` runs batches of examples as Ray tasks on a cluster. It is imported only when
``dsp.evaluate(..., backend="ray")`` asks for it, and imports ray only when it runs, so importing dsp
never imports ray.

>>> import importlib.util
>>> importlib.util.find_spec("dsp.backends.ray") is not None
True
>>> dsp.evaluate(program, dev, backend="ray", ray_address="auto", num_threads=4)   # doctest: +SKIP
"""

__all__: list[str] = []
