"""The ``philox`` sampler, one sampler in six modules: the numpy specification every backend matches
(``spec``), its numba kernels (``numba_kernels``) and runner (``numba_engine``), the torch engine
batched over MLPs (``torch_engine``), the plain CUDA path (``cuda_engine``) and the fused Triton kernel
(``triton_kernel``)."""
