"""One adapter per engine; each imports `sagespec.common`, `sagespec.kernels` and its own engine only."""
